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
func (s *api) routes() {
	get := func(pattern string, h http.HandlerFunc) { s.mux.Handle(pattern, s.authorize(h)) }
	write := func(pattern string, h http.HandlerFunc) { s.mux.Handle(pattern, s.authorize(s.writable(h))) }

	get("GET /api/overview", s.apiOverview)
	get("GET /api/overview/series", s.overviewSeries)
	get("GET /api/saga-types", s.apiSagaTypes)

	get("GET /api/sagas", s.querySagas)
	get("GET /api/sagas/{type}/{key}", s.getSaga)
	get("GET /api/sagas/{type}/{key}/history", s.apiHistory)
	get("GET /api/sagas/{type}/{key}/retries", s.apiRetries)
	write("POST /api/sagas/{type}/{key}/retries/{id}/retry", s.apiRetryNow)
	write("POST /api/sagas/{type}/{key}/end", s.apiEndSaga)
	write("POST /api/sagas/{type}/{key}/events", s.apiSendEvent)
	get("GET /api/sagas/select", s.apiSelectSagas)
	write("POST /api/sagas/end", s.apiEndSagas)
	write("POST /api/messages", s.submit)

	get("GET /api/dead-letters", s.queryDeadLetters)
	get("GET /api/dead-letters/counts", s.apiDeadLetterCounts)
	get("GET /api/dead-letters/groups", s.apiDeadLetterGroups)
	get("GET /api/dead-letters/{id}", s.getDeadLetter)
	write("POST /api/dead-letters/{id}/replay", s.replayDeadLetter)
	write("DELETE /api/dead-letters/{id}", s.deleteDeadLetter)
	write("POST /api/dead-letters/replay", s.apiBulkDeadLetters(true))
	write("POST /api/dead-letters/purge", s.apiBulkDeadLetters(false))
	write("POST /api/dead-letters/archive", s.apiTriage("archive"))
	write("POST /api/dead-letters/restore", s.apiTriage("restore"))

	get("GET /api/retries/select", s.apiSelectRetries)
	write("POST /api/retries/retry", s.apiRetryNowBatch)

	get("GET /api/timers", s.apiTimers)
	write("DELETE /api/timers/{type}/{key}/{name}", s.apiCancelTimer)
	write("POST /api/timers/{type}/{key}/{name}/reschedule", s.apiRescheduleTimer)

	get("GET /api/schedules", s.apiSchedules)
	write("POST /api/schedules/{name}/pause", s.apiPauseSchedule(true))
	write("POST /api/schedules/{name}/resume", s.apiPauseSchedule(false))
	write("DELETE /api/schedules/{name}", s.apiDeleteSchedule)
	write("POST /api/schedules/{name}/fire", s.apiFireSchedule)

	get("GET /api/replicas", s.apiReplicas)
	write("POST /api/replicas/remove", s.apiRemoveReplicas)

	get("/api/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no API route %s %s: see the routes in the documentation of package admin", r.Method, r.URL.Path)
	})
}

// routes registers the console's pages and forms, each behind a login
// session, and the login form and the assets, which need none.
func (s *console) routes() {
	page := func(pattern string, h http.HandlerFunc) { s.mux.Handle(pattern, s.consolePage(h)) }

	page("GET /{$}", s.pageOverview)
	page("GET /overview/series", s.overviewSeries)
	page("GET /sagas", s.pageSagaTypes)

	page("GET /instances", s.pageInstances)
	page("GET /instances/{type}/{key}", s.pageInstance)
	page("GET /instances/{type}/{key}/history.json", s.downloadHistory)
	page("POST /instances/{type}/{key}/end", s.actEndSaga)
	page("POST /instances/{type}/{key}/send", s.actSendEvent)
	page("GET /instances/end", s.pageBatchEnd)
	page("POST /instances/end", s.actBatchEnd)

	page("GET /dead-letters", s.pageDeadLetters)
	page("GET /dead-letters/{id}", s.pageDeadLetter)
	page("POST /dead-letters/{id}/replay", s.actReplay)
	page("POST /dead-letters/{id}/purge", s.actPurge)
	page("POST /dead-letters/bulk", s.actBulk)
	page("POST /dead-letters/selected", s.actSelected)

	page("GET /retries", s.pageRetries)
	page("GET /retries/retry-now", s.pageAskRetryNow)
	page("POST /retries/retry-now", s.actRetryNow)
	page("GET /retries/retry", s.pageAskRetryBatch)
	page("POST /retries/retry", s.actRetryBatch)

	page("GET /timers", s.pageTimers)
	page("GET /timers/cancel", s.pageCancelTimer)
	page("POST /timers/cancel", s.actCancelTimer)
	page("POST /timers/reschedule", s.actRescheduleTimer)

	page("GET /schedules", s.pageSchedules)
	page("POST /schedules/pause", s.actPauseSchedule("pause"))
	page("POST /schedules/resume", s.actPauseSchedule("resume"))
	page("POST /schedules/fire", s.actFireSchedule)

	page("GET /replicas", s.pageReplicas)
	page("POST /replicas/remove", s.actRemoveReplicas)

	page("POST /logout", s.logout)
	s.mux.HandleFunc("GET /login", s.loginForm)
	s.mux.HandleFunc("POST /login", s.login)
	assets, _ := fs.Sub(assetFiles, "assets")
	files := http.FileServerFS(assets)
	s.mux.Handle("GET /assets/", http.StripPrefix("/assets", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		files.ServeHTTP(w, r)
	})))
	page("/", func(w http.ResponseWriter, r *http.Request) {
		s.consoleError(w, r, http.StatusNotFound, "There is no console page at this address.")
	})
}
