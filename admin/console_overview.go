package admin

import (
	"net/http"
	"time"
)

func (c *console) pageOverview(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := c.storeCtx(r)
	defer cancel()
	o, err := c.overview(ctx)
	if err != nil {
		c.storeFailed(w, r, "overview", err)
		return
	}
	c.charts.touch(time.Now()) // the charts sample while someone looks
	c.render(w, r, http.StatusOK, "overview", "Overview", o)
}
