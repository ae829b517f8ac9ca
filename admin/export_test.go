package admin

import "time"

// SetClock makes s read the time from now for its sessions and its
// limit of failed logins.
func SetClock(s *Server, now func() time.Time) { s.sessions.now = now }
