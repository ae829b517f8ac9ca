package kafka

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// declare creates the topic with Config.Partitions partitions unless it
// exists, and refuses a topic with another partition count: Publish
// chooses a record's partition by hashing its saga key modulo the count,
// so every replica and tool must agree on it.
func (t *Transport) declare(ctx context.Context) error {
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic = t.cfg.Topic
	rt.NumPartitions = int32(t.cfg.Partitions)
	rt.ReplicationFactor = int16(t.cfg.ReplicationFactor)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, t.producer)
	if err != nil {
		return t.explain("creating topic "+t.cfg.Topic, err)
	}
	for _, r := range resp.Topics {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return t.explain("creating topic "+t.cfg.Topic, err)
		}
	}
	n, err := t.partitionCount(ctx)
	if err != nil {
		return err
	}
	if n != t.cfg.Partitions {
		return fmt.Errorf("kafka: topic %q has %d partitions, not %d: use the same Config.Partitions on every replica and tool (records are routed by saga key modulo the count), or another Config.Topic",
			t.cfg.Topic, n, t.cfg.Partitions)
	}
	return nil
}

// partitionCount reads the topic's partition count, waiting (up to 10 s)
// for a topic just created to appear in the metadata.
func (t *Transport) partitionCount(ctx context.Context) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		req := kmsg.NewPtrMetadataRequest()
		mt := kmsg.NewMetadataRequestTopic()
		mt.Topic = kmsg.StringPtr(t.cfg.Topic)
		req.Topics = append(req.Topics, mt)
		resp, err := req.RequestWith(ctx, t.producer)
		if err != nil {
			return 0, t.explain("reading the metadata of topic "+t.cfg.Topic, err)
		}
		var lastErr error
		for _, mt := range resp.Topics {
			err := kerr.ErrorForCode(mt.ErrorCode)
			if err == nil && len(mt.Partitions) > 0 {
				return len(mt.Partitions), nil
			}
			lastErr = err
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("kafka: topic %q did not appear in the metadata of %s: %w (last error: %w)", t.cfg.Topic, t.safe, ctx.Err(), lastErr)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// explain turns a failure to talk to the cluster into advice.
func (t *Transport) explain(what string, err error) error {
	switch {
	case errors.Is(err, kerr.TopicAuthorizationFailed), errors.Is(err, kerr.ClusterAuthorizationFailed), errors.Is(err, kerr.GroupAuthorizationFailed):
		return fmt.Errorf("kafka: %s on %s: the principal lacks a permission: allow it to create, describe, read and write topic %q and to read group %q: %w", what, t.safe, t.cfg.Topic, t.cfg.Group, err)
	case errors.Is(err, kerr.InvalidReplicationFactor):
		return fmt.Errorf("kafka: %s on %s: the cluster has fewer brokers than the replication factor: lower Config.ReplicationFactor (-1 takes the broker's default): %w", what, t.safe, err)
	case errors.Is(err, kerr.InvalidTopicException):
		return fmt.Errorf("kafka: %s on %s: the broker refused the topic name %q: choose another Config.Topic: %w", what, t.safe, t.cfg.Topic, err)
	}
	var ke *kerr.Error
	if !errors.As(err, &ke) {
		return fmt.Errorf("kafka: %s: cannot reach the cluster at %s: check the brokers in the URL and that Kafka is running and listening there: %w", what, t.safe, err)
	}
	return fmt.Errorf("kafka: %s on %s: %w", what, t.safe, err)
}

// DeleteNamespace deletes cfg's topic, with every message in it, and its
// consumer group (Config.Group). It is for throwaway topics (benchmarks,
// tests); stop every transport of the topic first.
func DeleteNamespace(ctx context.Context, rawURL string, cfg *Config) error {
	c, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	seeds, safe, err := ParseURL(rawURL)
	if err != nil {
		return err
	}
	t := &Transport{cfg: c, seeds: seeds, safe: safe, log: c.Logger}
	cl, err := kgo.NewClient(append(t.commonOpts(), c.Opts...)...)
	if err != nil {
		return fmt.Errorf("kafka: client for %s: %w", safe, err)
	}
	defer cl.Close()
	return t.deleteWith(ctx, cl)
}

// DeleteNamespace deletes the topic and group of t with every message in
// them, as the package function DeleteNamespace does, through t's
// producer's connection. Close t first if it consumed: a member of the
// group keeps it from being deleted.
func (t *Transport) DeleteNamespace(ctx context.Context) error {
	return t.deleteWith(ctx, t.producer)
}

func (t *Transport) deleteWith(ctx context.Context, cl *kgo.Client) error {
	dg := kmsg.NewPtrDeleteGroupsRequest()
	dg.Groups = []string{t.cfg.Group}
	gresp, err := dg.RequestWith(ctx, cl)
	if err != nil {
		return t.explain("deleting group "+t.cfg.Group, err)
	}
	for _, g := range gresp.Groups {
		if err := kerr.ErrorForCode(g.ErrorCode); err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
			return t.explain("deleting group "+t.cfg.Group, err)
		}
	}
	dt := kmsg.NewPtrDeleteTopicsRequest()
	dt.TopicNames = []string{t.cfg.Topic}
	name := t.cfg.Topic
	dt.Topics = []kmsg.DeleteTopicsRequestTopic{{Topic: &name}}
	tresp, err := dt.RequestWith(ctx, cl)
	if err != nil {
		return t.explain("deleting topic "+t.cfg.Topic, err)
	}
	for _, r := range tresp.Topics {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil && !errors.Is(err, kerr.UnknownTopicOrPartition) {
			return t.explain("deleting topic "+t.cfg.Topic, err)
		}
	}
	return nil
}
