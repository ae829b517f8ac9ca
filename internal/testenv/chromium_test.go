package testenv

import "testing"

// chromiumTB records what Chromium does to a test.
type chromiumTB struct{ fakeTB }

func (f *chromiumTB) Fatal(args ...any) { f.failed = "fatal"; panic(f) }
func (f *chromiumTB) Skip(args ...any)  { f.skipped = "skip"; panic(f) }

func runChromium(f *chromiumTB) (v string) {
	defer func() {
		if r := recover(); r != nil && r != any(f) {
			panic(r)
		}
	}()
	return Chromium(f)
}

func TestChromium(t *testing.T) {
	t.Setenv("IDEM_CHROMIUM", "/opt/chrome")
	if got := runChromium(&chromiumTB{}); got != "/opt/chrome" {
		t.Errorf("with IDEM_CHROMIUM set: got %q, want its value", got)
	}
	t.Setenv("IDEM_CHROMIUM", "")
	t.Setenv("PATH", t.TempDir()) // no browser on it
	t.Setenv("IDEM_REQUIRE_SERVERS", "")
	f := &chromiumTB{}
	runChromium(f)
	if f.skipped == "" || f.failed != "" {
		t.Errorf("no browser, servers not required: skipped %q failed %q, want a skip", f.skipped, f.failed)
	}
	t.Setenv("IDEM_REQUIRE_SERVERS", "1")
	f = &chromiumTB{}
	runChromium(f)
	if f.failed == "" || f.skipped != "" {
		t.Errorf("no browser, servers required: skipped %q failed %q, want a failure", f.skipped, f.failed)
	}
}
