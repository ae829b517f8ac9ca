package admin

import (
	"io/fs"
	"net/http"
)

// routes registers every route of the package documentation on s.mux:
// the probes, the metrics, the JSON API's and the console's.
func (s *Server) routes(metrics http.Handler) {
	s.mux.HandleFunc("GET /healthz", s.healthz)
	s.mux.HandleFunc("GET /readyz", s.readyz)
	s.mux.Handle("GET /metrics", s.authorize(metrics))
	s.api.routes()
	s.console.routes()
}

// routes registers the JSON API's routes, each behind the bearer token,
// and the mutating ones behind Config.ReadOnly too.
func (a *api) routes() {
	get := func(pattern string, h http.HandlerFunc) { a.mux.Handle(pattern, a.authorize(h)) }
	write := func(pattern string, h http.HandlerFunc) { a.mux.Handle(pattern, a.authorize(a.writable(h))) }

	get("GET /api/overview", a.apiOverview)
	get("GET /api/overview/series", a.overviewSeries)
	get("GET /api/saga-types", a.apiSagaTypes)

	get("GET /api/sagas", a.querySagas)
	get("GET /api/sagas/{type}/{key}", a.getSaga)
	get("GET /api/sagas/{type}/{key}/history", a.apiHistory)
	get("GET /api/sagas/{type}/{key}/retries", a.apiRetries)
	write("POST /api/sagas/{type}/{key}/retries/{id}/retry", a.apiRetryNow)
	write("POST /api/sagas/{type}/{key}/end", a.apiEndSaga)
	write("POST /api/sagas/{type}/{key}/events", a.apiSendEvent)
	get("GET /api/sagas/select", a.apiSelectSagas)
	write("POST /api/sagas/end", a.apiEndSagas)
	write("POST /api/messages", a.submit)

	get("GET /api/dead-letters", a.queryDeadLetters)
	get("GET /api/dead-letters/counts", a.apiDeadLetterCounts)
	get("GET /api/dead-letters/groups", a.apiDeadLetterGroups)
	get("GET /api/dead-letters/{id}", a.getDeadLetter)
	write("POST /api/dead-letters/{id}/replay", a.replayDeadLetter)
	write("DELETE /api/dead-letters/{id}", a.deleteDeadLetter)
	write("POST /api/dead-letters/replay", a.apiBulkDeadLetters(true))
	write("POST /api/dead-letters/purge", a.apiBulkDeadLetters(false))
	write("POST /api/dead-letters/archive", a.apiTriage("archive"))
	write("POST /api/dead-letters/restore", a.apiTriage("restore"))

	get("GET /api/retries/select", a.apiSelectRetries)
	write("POST /api/retries/retry", a.apiRetryNowBatch)

	get("GET /api/timers", a.apiTimers)
	write("DELETE /api/timers/{type}/{key}/{name}", a.apiCancelTimer)
	write("POST /api/timers/{type}/{key}/{name}/reschedule", a.apiRescheduleTimer)

	get("GET /api/schedules", a.apiSchedules)
	write("POST /api/schedules/{name}/pause", a.apiPauseSchedule(true))
	write("POST /api/schedules/{name}/resume", a.apiPauseSchedule(false))
	write("DELETE /api/schedules/{name}", a.apiDeleteSchedule)
	write("POST /api/schedules/{name}/fire", a.apiFireSchedule)

	get("GET /api/limits", a.apiLimits)
	write("POST /api/limits/{name}", a.apiSetLimit)
	write("POST /api/limits/{name}/reset", a.apiResetLimit)

	get("GET /api/replicas", a.apiReplicas)
	write("POST /api/replicas/remove", a.apiRemoveReplicas)

	get("GET /api/deploys", a.apiDeploys)

	get("/api/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no API route %s %s: see the routes in the documentation of package admin", r.Method, r.URL.Path)
	})
}

// routes registers the console's pages and forms, each behind a login
// session, and the login form and the assets, which need none.
func (c *console) routes() {
	page := func(pattern string, h http.HandlerFunc) { c.mux.Handle(pattern, c.consolePage(h)) }

	page("GET /{$}", c.pageOverview)
	page("GET /overview/series", c.overviewSeries)
	page("GET /sagas", c.pageSagaTypes)

	page("GET /instances", c.pageInstances)
	page("GET /instances/{type}/{key}", c.pageInstance)
	page("GET /instances/{type}/{key}/history.json", c.downloadHistory)
	page("POST /instances/{type}/{key}/end", c.actEndSaga)
	page("POST /instances/{type}/{key}/send", c.actSendEvent)
	page("GET /instances/end", c.pageBatchEnd)
	page("POST /instances/end", c.actBatchEnd)

	page("GET /dead-letters", c.pageDeadLetters)
	page("GET /dead-letters/{id}", c.pageDeadLetter)
	page("POST /dead-letters/{id}/replay", c.actReplay)
	page("POST /dead-letters/{id}/purge", c.actPurge)
	page("POST /dead-letters/bulk", c.actBulk)
	page("POST /dead-letters/selected", c.actSelected)

	page("GET /retries", c.pageRetries)
	page("GET /retries/retry-now", c.pageAskRetryNow)
	page("POST /retries/retry-now", c.actRetryNow)
	page("GET /retries/retry", c.pageAskRetryBatch)
	page("POST /retries/retry", c.actRetryBatch)

	page("GET /timers", c.pageTimers)
	page("GET /timers/cancel", c.pageCancelTimer)
	page("POST /timers/cancel", c.actCancelTimer)
	page("POST /timers/reschedule", c.actRescheduleTimer)

	page("GET /schedules", c.pageSchedules)
	page("POST /schedules/pause", c.actPauseSchedule("pause"))
	page("POST /schedules/resume", c.actPauseSchedule("resume"))
	page("POST /schedules/fire", c.actFireSchedule)

	page("GET /limits", c.pageLimits)
	page("POST /limits/set", c.actSetLimit)
	page("POST /limits/reset", c.actResetLimit)

	page("GET /replicas", c.pageReplicas)
	page("POST /replicas/remove", c.actRemoveReplicas)

	page("GET /deploys", c.pageDeploys)

	page("POST /logout", c.logout)
	c.mux.HandleFunc("GET /login", c.loginForm)
	c.mux.HandleFunc("POST /login", c.login)
	assets, _ := fs.Sub(assetFiles, "assets")
	files := http.FileServerFS(assets)
	c.mux.Handle("GET /assets/", http.StripPrefix("/assets", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		files.ServeHTTP(w, r)
	})))
	page("/", func(w http.ResponseWriter, r *http.Request) {
		c.consoleError(w, r, http.StatusNotFound, "There is no console page at this address.")
	})
}
