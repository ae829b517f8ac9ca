package admin

import "time"

// SetChartInterval makes s sample its overview charts every d instead of
// every 10 s. Call it before the first request.
func SetChartInterval(s *Server, d time.Duration) { s.charts.interval = d }
