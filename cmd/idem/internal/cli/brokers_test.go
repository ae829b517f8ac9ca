package cli

import (
	"net/url"
	"strings"
	"testing"
)

// Every --transport spec resolves to its entry of brokers, whatever the
// case of its scheme; anything else is refused with the list of brokers,
// and without the credentials of the spec.
func TestBrokerTable(t *testing.T) {
	for spec, want := range map[string]string{
		"nats://127.0.0.1:4222":              "nats",
		"nats://a:4222,nats://b:4222":        "nats",
		"tls://a:4222":                       "nats",
		transportEmbedded:                    "nats",
		"nats-cluster":                       "nats",
		"amqp://guest:guest@127.0.0.1:5672/": "rabbitmq",
		"AMQPS://h/vhost":                    "rabbitmq",
		"redis://127.0.0.1:6379/0":           "redis",
		"rediss://h:6380/0":                  "redis",
		"kafka://a:9092,b:9092":              "kafka",
	} {
		b, err := brokerFor(spec)
		if err != nil || b.name != want {
			t.Errorf("brokerFor(%q) = %v, %v; want the %s entry", spec, b, err, want)
		}
	}
	for _, spec := range []string{"sqs://u:secret@h:9092", "nats", "amqp", "postgres://u:secret@h/db", "redis:/x"} {
		_, err := brokerFor(spec)
		if err == nil {
			t.Errorf("brokerFor(%q) accepted", spec)
			continue
		}
		for _, b := range brokers {
			if !strings.Contains(err.Error(), b.example[:strings.Index(b.example, "://")+3]) {
				t.Errorf("brokerFor(%q): %v; want it to list %s", spec, err, b.example)
			}
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("brokerFor(%q): %v shows the password", spec, err)
		}
	}
	seen := map[string]bool{}
	for _, b := range brokers {
		if b.name == "" || b.example == "" || b.spec == "" || b.open == nil || b.bench == nil {
			t.Errorf("broker %+v: every entry needs a name, an example, a spec, open and bench", b)
		}
		for _, s := range b.schemes {
			if seen[s] {
				t.Errorf("scheme %s is in two entries", s)
			}
			seen[s] = true
		}
	}
	if got := brokerExamples(transportEmbedded); !strings.HasSuffix(got, " or "+transportEmbedded) || strings.Count(got, "://") != len(brokers) {
		t.Errorf("brokerExamples = %q: want each broker's example, then nats-embedded", got)
	}
}

// A store URL carrying pgstore's direct URL (idem_direct_url, escaped in
// its query) shows neither password when the CLI prints it.
func TestRedactURLHidesTheDirectURL(t *testing.T) {
	raw := "postgres://u:outer@127.0.0.1:6432/db?sslmode=disable&idem_direct_url=" + url.QueryEscape("postgres://u:inner@127.0.0.1:5432/db")
	got := redactURL(raw)
	if strings.Contains(got, "outer") || strings.Contains(got, "inner") || !strings.Contains(got, "127.0.0.1:6432") {
		t.Errorf("redactURL = %q: want both passwords hidden, the pooler's address kept", got)
	}
}
