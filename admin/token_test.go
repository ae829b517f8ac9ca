package admin_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
)

// POST /api/messages with "token": true mints a token and marks the
// message: the first copy claims it, a later copy is a duplicate. A client
// cannot set the token header itself.
func TestSubmitWithToken(t *testing.T) {
	b := setup(t, nil)
	msg := `{"id": "t-1", "type": "orders.OrderPlaced", "body": {"OrderID": "o-t", "Items": 1}, "token": true}`
	if code, body := b.do(t, "POST", "/api/messages", msg); code != http.StatusAccepted {
		t.Fatalf("submit with token: %d %s; want 202", code, body)
	}
	eventually(t, "the tokened message to be applied", func() bool { return b.e.Stats().Applied == 1 })
	n, err := b.st.CountTokens(context.Background())
	if err != nil || n != 0 {
		t.Fatalf("tokens after the message was applied: %d (%v), want 0 (claimed)", n, err)
	}
	// Submitted again with a token: the token is minted again, so this is
	// a new message as far as tokens go, but the inbox still knows it.
	if code, body := b.do(t, "POST", "/api/messages", msg); code != http.StatusAccepted {
		t.Fatalf("resubmit: %d %s; want 202", code, body)
	}
	eventually(t, "the copy to be skipped", func() bool { return b.e.Stats().Duplicates == 1 })

	forged := `{"id": "t-2", "type": "orders.OrderPlaced", "body": {"OrderID": "o-f", "Items": 1}, "headers": {"idem-token": "1"}}`
	if code, body := b.do(t, "POST", "/api/messages", forged); code != http.StatusBadRequest || !strings.Contains(body, "idem-token") {
		t.Fatalf("submit with a forged token header: %d %s; want 400 naming idem-token", code, body)
	}
}
