package ingest

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"path"
	"strconv"
	"strings"
)

// Handler returns the upload and status API:
//
//	POST /imports                 upload (multipart "file" and "supplier", or a
//	                              text/csv or application/json body with
//	                              ?supplier=CODE or X-Supplier-Code)
//	GET  /imports?status=&supplier=&after=&limit=
//	GET  /imports/{id}            status, counts, chunk results, audit trail
//	POST /imports/{id}/requeue    re-run the failed chunks
//
// Errors are JSON: {"error": "...", "problems": [{"line", "field", "message"}]}.
// maxFileName bounds an uploaded file's name, which travels with the job.
const maxFileName = 255

func (a *App) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /imports", a.upload)
	mux.HandleFunc("GET /imports", a.list)
	mux.HandleFunc("GET /imports/{id}", a.get)
	mux.HandleFunc("POST /imports/{id}/requeue", a.requeue)
	return mux
}

// ErrorBody is the JSON body of every error response.
type ErrorBody struct {
	Error    string    `json:"error"`
	Problems []Problem `json:"problems,omitempty"`
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func writeErr(w http.ResponseWriter, code int, msg string, ps ...Problem) {
	writeJSON(w, code, ErrorBody{Error: msg, Problems: ps})
}

// formatOf maps a content type (or, failing that, a file name) to a format.
func formatOf(contentType, name string) string {
	mt, _, _ := mime.ParseMediaType(contentType)
	switch mt {
	case "text/csv":
		return FormatCSV
	case "application/json":
		return FormatJSON
	}
	switch strings.ToLower(path.Ext(name)) {
	case ".csv":
		return FormatCSV
	case ".json":
		return FormatJSON
	}
	return ""
}

func (a *App) upload(w http.ResponseWriter, r *http.Request) {
	limit := int64(a.cfg.MaxFileBytes)
	r.Body = http.MaxBytesReader(w, r.Body, limit+64<<10)
	var (
		supplier, format, name string
		content                []byte
		err                    error
	)
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch mt {
	case "multipart/form-data":
		supplier, format, name, content, err = readMultipart(r, limit)
	case "text/csv", "application/json":
		format = formatOf(mt, "")
		supplier = r.URL.Query().Get("supplier")
		if supplier == "" {
			supplier = r.Header.Get("X-Supplier-Code")
		}
		name = r.URL.Query().Get("name")
		content, err = io.ReadAll(io.LimitReader(r.Body, limit+1))
	default:
		writeErr(w, http.StatusUnsupportedMediaType, fmt.Sprintf("content type %q: send text/csv, application/json or multipart/form-data", mt),
			Problem{Field: "Content-Type", Message: "want text/csv, application/json or multipart/form-data"})
		return
	}
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe) || (err == nil && int64(len(content)) > limit):
		writeErr(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("file over the limit of %d bytes", limit),
			Problem{Line: 0, Field: "file", Message: fmt.Sprintf("over %d bytes", limit)})
		return
	case errors.Is(err, errUnsupportedPart):
		writeErr(w, http.StatusUnsupportedMediaType, err.Error(), Problem{Field: "file", Message: "want a text/csv or application/json file (.csv or .json)"})
		return
	case err != nil:
		writeErr(w, http.StatusBadRequest, err.Error())
		return
	}
	if supplier == "" {
		writeErr(w, http.StatusBadRequest, "supplier code missing", Problem{Field: "supplier", Message: "required: a multipart field, ?supplier= or X-Supplier-Code"})
		return
	}
	sub, err := a.Submit(r.Context(), supplier, format, name, content)
	var ve *ValidationError
	switch {
	case errors.As(err, &ve):
		writeErr(w, http.StatusUnprocessableEntity, ve.Error(), ve.Problems...)
		return
	case errors.Is(err, ErrBadSupplier):
		writeErr(w, http.StatusBadRequest, err.Error(), Problem{Field: "supplier", Message: err.Error()})
		return
	case errors.Is(err, ErrTooLarge):
		writeErr(w, http.StatusRequestEntityTooLarge, err.Error(), Problem{Field: "file", Message: err.Error()})
		return
	case err != nil:
		a.log.ErrorContext(r.Context(), "upload failed", "error", err)
		writeErr(w, http.StatusServiceUnavailable, "the upload could not be recorded; retry it (it is idempotent)")
		return
	}
	w.Header().Set("Location", "/imports/"+sub.JobID)
	switch {
	case sub.Pending:
		writeJSON(w, http.StatusAccepted, map[string]string{"id": sub.JobID, "status": "Received"})
	case sub.Created:
		writeJSON(w, http.StatusCreated, sub.Job)
	default:
		writeJSON(w, http.StatusOK, sub.Job)
	}
}

var errUnsupportedPart = errors.New("unsupported file type")

func readMultipart(r *http.Request, limit int64) (supplier, format, name string, content []byte, err error) {
	mr, err := r.MultipartReader()
	if err != nil {
		return "", "", "", nil, err
	}
	for {
		p, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", "", "", nil, err
		}
		switch p.FormName() {
		case "supplier":
			b, err := io.ReadAll(io.LimitReader(p, 256))
			if err != nil {
				return "", "", "", nil, err
			}
			supplier = strings.TrimSpace(string(b))
		case "file":
			if name = p.FileName(); len(name) > maxFileName {
				return "", "", "", nil, fmt.Errorf("file name of %d bytes, longer than the %d allowed", len(name), maxFileName)
			}
			if format = formatOf(partType(p), name); format == "" {
				return "", "", "", nil, fmt.Errorf("%w: file %q of type %q", errUnsupportedPart, name, partType(p))
			}
			if content, err = io.ReadAll(io.LimitReader(p, limit+1)); err != nil {
				return "", "", "", nil, err
			}
		}
	}
	if content == nil {
		return "", "", "", nil, errors.New(`multipart upload without a "file" part`)
	}
	return supplier, format, name, content, nil
}

func partType(p *multipart.Part) string { return p.Header.Get("Content-Type") }

func (a *App) get(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !validJobID(id) {
		writeErr(w, http.StatusNotFound, "no job "+strconv.Quote(id))
		return
	}
	v, err := a.Job(r.Context(), id)
	switch {
	case err != nil:
		a.log.ErrorContext(r.Context(), "read job failed", "job", id, "error", err)
		writeErr(w, http.StatusServiceUnavailable, "the job could not be read; retry")
	case v == nil:
		writeErr(w, http.StatusNotFound, "no job "+strconv.Quote(id))
	default:
		writeJSON(w, http.StatusOK, v)
	}
}

func (a *App) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, _ := strconv.Atoi(q.Get("limit"))
	jobs, err := a.Jobs(r.Context(), Filter{Status: q.Get("status"), Supplier: q.Get("supplier"), After: q.Get("after"), Limit: limit})
	if err != nil {
		a.log.ErrorContext(r.Context(), "list jobs failed", "error", err)
		writeErr(w, http.StatusInternalServerError, "list jobs failed")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"jobs": jobs})
}

func (a *App) requeue(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !validJobID(id) {
		writeErr(w, http.StatusNotFound, "no job "+strconv.Quote(id))
		return
	}
	err := a.Requeue(r.Context(), id)
	switch {
	case errors.Is(err, ErrNotFound):
		writeErr(w, http.StatusNotFound, err.Error())
	case errors.Is(err, ErrNotRequeueable):
		writeErr(w, http.StatusConflict, err.Error())
	case err != nil:
		a.log.ErrorContext(r.Context(), "requeue failed", "job", id, "error", err)
		writeErr(w, http.StatusServiceUnavailable, "the requeue could not be recorded; retry it (it is idempotent)")
	default:
		writeJSON(w, http.StatusAccepted, map[string]string{"id": id, "status": "requeued"})
	}
}

// validJobID reports whether id can name a job: an IdempotencyKey, 64
// lower-case hex digits. Anything else is a client's mistake (404), never
// sent to the store.
func validJobID(id string) bool {
	if len(id) != 2*sha256.Size {
		return false
	}
	for i := range len(id) {
		if c := id[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
