package ingest

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Formats of an uploaded file.
const (
	FormatCSV  = "csv"
	FormatJSON = "json"
)

// Columns are the fields of a delivery-advice line, in CSV header order.
var Columns = []string{"advice_id", "line_no", "sku", "quantity", "expected_date", "depot"}

// Line is one delivery-advice line: supplier SupplierCode announces
// Quantity units of SKU for depot Depot on ExpectedDate. Row is its
// position in the file (the CSV line number, header included, or the JSON
// record number starting at 1).
type Line struct {
	Row          int    `json:"row"`
	AdviceID     string `json:"advice_id"`
	LineNo       int    `json:"line_no"`
	SKU          string `json:"sku"`
	Quantity     int    `json:"quantity"`
	ExpectedDate string `json:"expected_date"`
	Depot        string `json:"depot"`
}

// Problem is one validation failure: the file line (or JSON record) and
// the field it concerns. Line 0 concerns the whole file.
type Problem struct {
	Line    int    `json:"line"`
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
}

// ValidationError lists a file's problems (at most MaxProblems).
type ValidationError struct {
	Problems []Problem `json:"problems"`
}

func (e *ValidationError) Error() string {
	if len(e.Problems) == 0 {
		return "invalid file"
	}
	p := e.Problems[0]
	s := fmt.Sprintf("invalid file: line %d", p.Line)
	if p.Field != "" {
		s += " field " + p.Field
	}
	s += ": " + p.Message
	if len(e.Problems) > 1 {
		s += fmt.Sprintf(" (and %d more)", len(e.Problems)-1)
	}
	return s
}

// MaxProblems bounds the problems one validation reports.
const MaxProblems = 100

var supplierRE = regexp.MustCompile(`^[A-Z0-9][A-Z0-9-]{0,31}$`)

// ValidSupplier reports whether code is a supplier code: 1 to 32 upper-case
// letters, digits and dashes, starting with a letter or digit.
func ValidSupplier(code string) bool { return supplierRE.MatchString(code) }

// Parse decodes and validates a CSV or JSON delivery-advice file. It is
// pure, so the API (to answer 4xx at once) and the job saga (before it
// splits the file) run the same checks. It returns a *ValidationError when
// the file is empty, has unknown or missing columns, or a field that does
// not parse, or bytes that are not UTF-8 (named by line and byte offset).
func Parse(format string, content []byte) ([]Line, error) {
	if len(bytes.TrimSpace(content)) == 0 {
		return nil, &ValidationError{Problems: []Problem{{Line: 0, Message: "the file is empty"}}}
	}
	if !utf8.Valid(content) {
		at := invalidUTF8(content)
		return nil, &ValidationError{Problems: []Problem{{Line: 1 + bytes.Count(content[:at], []byte{'\n'}), Field: "encoding",
			Message: fmt.Sprintf("byte %d (0x%02x) is not valid UTF-8: the file must be UTF-8", at, content[at])}}}
	}
	switch format {
	case FormatCSV:
		return parseCSV(content)
	case FormatJSON:
		return parseJSON(content)
	}
	return nil, &ValidationError{Problems: []Problem{{Line: 0, Message: fmt.Sprintf("unknown format %q: want csv or json", format)}}}
}

// invalidUTF8 returns the offset of the first byte of b that is not part of
// a valid UTF-8 sequence.
func invalidUTF8(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return len(b)
}

type collector struct{ ps []Problem }

func (c *collector) add(line int, field, format string, args ...any) {
	if len(c.ps) < MaxProblems {
		c.ps = append(c.ps, Problem{Line: line, Field: field, Message: fmt.Sprintf(format, args...)})
	}
}

func (c *collector) err() error {
	if len(c.ps) == 0 {
		return nil
	}
	return &ValidationError{Problems: c.ps}
}

func parseCSV(content []byte) ([]Line, error) {
	r := csv.NewReader(bytes.NewReader(content))
	r.ReuseRecord = true
	r.FieldsPerRecord = -1
	var c collector
	header, err := r.Read()
	if err != nil {
		c.add(1, "", "header: %v", err)
		return nil, c.err()
	}
	idx := map[string]int{}
	for i, h := range header {
		h = strings.TrimSpace(strings.TrimPrefix(h, "\ufeff"))
		if !slices.Contains(Columns, h) {
			c.add(1, h, "unknown column %q: the columns are %s", h, strings.Join(Columns, ","))
			continue
		}
		if _, dup := idx[h]; dup {
			c.add(1, h, "column %q appears twice", h)
		}
		idx[h] = i
	}
	for _, col := range Columns {
		if _, ok := idx[col]; !ok {
			c.add(1, col, "missing column %q", col)
		}
	}
	if len(c.ps) > 0 {
		return nil, c.err()
	}
	ncols := len(header)
	var lines []Line
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		row, _ := r.FieldPos(0)
		if err != nil {
			c.add(row, "", "%v", err)
			if len(c.ps) >= MaxProblems {
				break
			}
			continue
		}
		if len(rec) != ncols {
			c.add(row, "", "%d fields, want %d", len(rec), ncols)
			continue
		}
		get := func(col string) string { return strings.TrimSpace(rec[idx[col]]) }
		lines = append(lines, checkLine(&c, row, get))
	}
	if len(lines) == 0 && len(c.ps) == 0 {
		c.add(0, "", "the file has a header but no lines")
	}
	if err := c.err(); err != nil {
		return nil, err
	}
	return lines, nil
}

func parseJSON(content []byte) ([]Line, error) {
	var c collector
	var recs []map[string]json.RawMessage
	if err := json.Unmarshal(content, &recs); err != nil {
		c.add(0, "", "want a JSON array of objects: %v", err)
		return nil, c.err()
	}
	if len(recs) == 0 {
		c.add(0, "", "the file has no records")
		return nil, c.err()
	}
	lines := make([]Line, 0, len(recs))
	for i, rec := range recs {
		row := i + 1
		for k := range rec {
			if !slices.Contains(Columns, k) {
				c.add(row, k, "unknown field %q: the fields are %s", k, strings.Join(Columns, ","))
			}
		}
		get := func(col string) string {
			raw, ok := rec[col]
			if !ok {
				return ""
			}
			var s string
			if json.Unmarshal(raw, &s) == nil {
				return strings.TrimSpace(s)
			}
			return strings.TrimSpace(string(raw)) // a number
		}
		lines = append(lines, checkLine(&c, row, get))
	}
	if err := c.err(); err != nil {
		return nil, err
	}
	return lines, nil
}

// MaxFieldBytes bounds advice_id, sku and depot, so that a chunk of lines
// has a bounded size as a message (see MaxMessageBytes).
const MaxFieldBytes = 64

func checkLine(c *collector, row int, get func(string) string) Line {
	l := Line{Row: row, AdviceID: get("advice_id"), SKU: get("sku"), ExpectedDate: get("expected_date"), Depot: get("depot")}
	for _, f := range []struct{ name, v string }{{"advice_id", l.AdviceID}, {"sku", l.SKU}, {"depot", l.Depot}} {
		switch {
		case f.v == "":
			c.add(row, f.name, "required")
		case len(f.v) > MaxFieldBytes:
			c.add(row, f.name, "%d bytes, longer than the %d allowed", len(f.v), MaxFieldBytes)
		}
	}
	var err error
	if l.LineNo, err = strconv.Atoi(get("line_no")); err != nil || l.LineNo < 1 {
		c.add(row, "line_no", "%q is not a positive integer", get("line_no"))
	}
	if l.Quantity, err = strconv.Atoi(get("quantity")); err != nil || l.Quantity < 1 {
		c.add(row, "quantity", "%q is not a positive integer", get("quantity"))
	}
	if _, err := time.Parse(time.DateOnly, l.ExpectedDate); err != nil {
		c.add(row, "expected_date", "%q is not a date (want YYYY-MM-DD)", l.ExpectedDate)
	}
	return l
}
