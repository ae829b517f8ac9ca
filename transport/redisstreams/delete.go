package redisstreams

import (
	"context"
	"fmt"
)

// DeleteNamespace deletes every key of cfg's namespace, with every message
// in it: the partition streams (and so the consumer group), the delay
// sets, the wake stream and the recorded partition count. It is for
// throwaway namespaces (benchmarks, tests); stop every transport of the
// namespace first. It connects with the same checks as Open, except that
// the server's persistence is not required.
func DeleteNamespace(ctx context.Context, rawURL string, cfg *Config) error {
	c, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	opt, safe, err := parseURL(rawURL)
	if err != nil {
		return err
	}
	if err := checkAuth(ctx, opt, safe, c.AllowUnauthenticated); err != nil {
		return err
	}
	opt.ClientName = c.ClientName
	t := newTransport(redisClient(opt), c, safe)
	defer func() {
		t.cancel()
		_ = t.rdb.Close()
	}()
	return t.deleteKeys(ctx)
}

// DeleteNamespace deletes the namespace of t with every message in it, as
// the package function DeleteNamespace does, through t's connection.
func (t *Transport) DeleteNamespace(ctx context.Context) error {
	return t.deleteKeys(ctx)
}

func (t *Transport) deleteKeys(ctx context.Context) error {
	keys := append(append(append([]string(nil), t.streams...), t.delays...), t.wake, t.meta)
	for start := 0; start < len(keys); start += 256 {
		if err := t.rdb.Del(ctx, keys[start:min(start+256, len(keys))]...).Err(); err != nil {
			return t.explain(fmt.Sprintf("deleting namespace %q", t.cfg.Namespace), err)
		}
	}
	return nil
}
