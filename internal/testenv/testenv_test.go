package testenv

import (
	"testing"
)

// fakeTB records what Server does to a test.
type fakeTB struct {
	testing.TB
	skipped, failed string
}

func (f *fakeTB) Helper()                          {}
func (f *fakeTB) Skipf(format string, args ...any) { f.skipped = format; panic(f) }
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed = format
	panic(f)
}

func run(f *fakeTB) (v string) {
	defer func() {
		if r := recover(); r != nil && r != any(f) {
			panic(r)
		}
	}()
	return Server(f, "IDEM_TESTENV_PROBE", "probe tests", "x://y")
}

func TestServer(t *testing.T) {
	t.Setenv("IDEM_TESTENV_PROBE", "x://server")
	if got := run(&fakeTB{}); got != "x://server" {
		t.Errorf("with the variable set: got %q, want its value", got)
	}

	t.Setenv("IDEM_TESTENV_PROBE", "")
	t.Setenv("IDEM_REQUIRE_SERVERS", "")
	f := &fakeTB{}
	run(f)
	if f.skipped == "" || f.failed != "" {
		t.Errorf("unset, servers not required: skipped %q failed %q, want a skip", f.skipped, f.failed)
	}

	t.Setenv("IDEM_REQUIRE_SERVERS", "1")
	f = &fakeTB{}
	run(f)
	if f.failed == "" || f.skipped != "" {
		t.Errorf("unset, servers required: skipped %q failed %q, want a failure", f.skipped, f.failed)
	}
}
