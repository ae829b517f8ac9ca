package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"
)

// DeleteNamespace deletes the exchanges and queues that Open declares for
// cfg's namespace and partitions, with every message they hold: partition,
// delay and dead-letter queues. What does not exist is skipped. It is for
// throwaway namespaces (benchmarks, tests); stop every transport of the
// namespace first.
func DeleteNamespace(ctx context.Context, url string, cfg *Config) error {
	c, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	urls, safes, err := parseURLs(url)
	if err != nil {
		return err
	}
	t := &Transport{urls: urls, safes: safes, safe: strings.Join(safes, ","), cfg: c, log: c.Logger}
	conn, err := t.dial(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	queues := append(t.Queues(), t.deadQueue())
	for _, b := range delayBuckets {
		queues = append(queues, t.delayQueue(b.Milliseconds()))
	}
	var errs []error
	// A failed delete closes its channel: one channel each.
	for _, q := range queues {
		errs = append(errs, ignoreNotFound(withChannel(conn, func(ch *amqp.Channel) error {
			_, err := ch.QueueDelete(q, false, false, false)
			return err
		})))
	}
	for _, x := range []string{t.exchange(), t.delayExchange(), t.deadExchange()} {
		errs = append(errs, ignoreNotFound(withChannel(conn, func(ch *amqp.Channel) error {
			return ch.ExchangeDelete(x, false, false)
		})))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("rabbitmq: delete namespace %s: %w", c.Namespace, err)
	}
	return nil
}

func withChannel(conn *amqp.Connection, fn func(ch *amqp.Channel) error) error {
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	if err := fn(ch); err != nil {
		return err
	}
	return ch.Close()
}

func ignoreNotFound(err error) error {
	var ae *amqp.Error
	if errors.As(err, &ae) && ae.Code == amqp.NotFound {
		return nil
	}
	return err
}
