package store

import "context"

// ShareWaiting is one share of a fair queue (transport.HeaderFairnessKey)
// with the messages it has waiting: visible and not leased.
type ShareWaiting struct {
	Share   string `json:"share"`
	Waiting int    `json:"waiting"`
}

// FairShareReader is a queue that receives in fair order
// (ReceiveParams.Fair) and tells how many messages each share has
// waiting, for the operator's tools. It is an optional capability, found
// by type assertion. Counting reads the whole visible backlog.
type FairShareReader interface {
	// WaitingShares returns the max shares with the most messages
	// waiting (ties by share, byte for byte), and how many shares have
	// any waiting in all.
	WaitingShares(ctx context.Context, max int) ([]ShareWaiting, int, error)
}
