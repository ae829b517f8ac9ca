package admin

import (
	"net/http"
	"time"
)

func (s *console) pageOverview(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.storeCtx(r)
	defer cancel()
	o, err := s.overview(ctx)
	if err != nil {
		s.storeFailed(w, r, "overview", err)
		return
	}
	s.charts.touch(time.Now()) // the charts sample while someone looks
	s.render(w, r, http.StatusOK, "overview", "Overview", o)
}
