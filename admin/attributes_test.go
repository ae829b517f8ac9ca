package admin_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/internal/enginetest"
)

const hostileSupplier = `<script>alert("po")</script>`

// setupPO is setup with the purchase-order saga, whose "supplier" is a
// business attribute, and three orders applied: po-1 from Müller (sent in
// NFD), po-2 from acme, po-3 from a hostile supplier name.
func setupPO(t *testing.T) *bundle {
	t.Helper()
	b := setupWith(t, nil, 0, enginetest.POMachine())
	seedPO(t, b)
	return b
}

func seedPO(t *testing.T, b *bundle) {
	t.Helper()
	for id, supplier := range map[string]string{"po-1": "Mu\u0308ller", "po-2": "acme", "po-3": hostileSupplier} {
		env, err := b.e.NewEnvelope("placed-"+id, enginetest.POPlaced{ID: id, Supplier: supplier})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.e.PublishAndWait(context.Background(), env); err != nil {
			t.Fatalf("apply %s: %v", id, err)
		}
	}
}

func TestAPIFiltersSagasByAttribute(t *testing.T) {
	t.Parallel()
	b := setupPO(t)
	keys := func(query string) []string {
		t.Helper()
		var list admin.SagaList
		b.getJSON(t, "/api/sagas?"+query, &list)
		var ks []string
		for _, s := range list.Sagas {
			ks = append(ks, s.Key)
		}
		return ks
	}
	if got := keys("attr=" + url.QueryEscape("supplier=M\u00fcller")); strings.Join(got, ",") != "po-1" {
		t.Errorf("attr supplier=Müller (NFC): got %v, want po-1", got)
	}
	if got := keys("type=purchase-order&attr=" + url.QueryEscape("supplier=Mu\u0308ller")); strings.Join(got, ",") != "po-1" {
		t.Errorf("attr supplier=Müller (NFD): got %v, want po-1", got)
	}
	if got := keys("attr=supplier%3Dacme&attr=supplier%3Dacme"); strings.Join(got, ",") != "po-2" {
		t.Errorf("attr supplier=acme twice: got %v, want po-2", got)
	}
	var list admin.SagaList
	b.getJSON(t, "/api/sagas?attr="+url.QueryEscape("supplier="+hostileSupplier), &list)
	if len(list.Sagas) != 1 || list.Sagas[0].Attributes["supplier"] != hostileSupplier {
		t.Errorf("attr with the hostile supplier: got %+v, want po-3 with its attribute", list.Sagas)
	}
	for _, bad := range []string{"supplier", "supplier%3Da%00b", "supplier%3Da%FF", "supplier%3Dacme&attr=supplier%3Dglobex"} {
		code, body := b.do(t, http.MethodGet, "/api/sagas?attr="+bad, "")
		if code != http.StatusBadRequest || !strings.Contains(body, "attribute filter") {
			t.Errorf("attr=%s: status %d, body %s; want 400 naming the attribute filter", bad, code, body)
		}
	}
}

func TestConsoleFiltersInstancesByAttribute(t *testing.T) {
	t.Parallel()
	b := setupPO(t)
	br := newBrowser(t, b)
	code, page := br.get("/instances?attr=" + url.QueryEscape("supplier=acme"))
	if code != http.StatusOK || !strings.Contains(page, "po-2") || strings.Contains(page, "po-1") || !strings.Contains(page, `value="supplier=acme"`) {
		t.Errorf("instances filtered by supplier=acme: status %d; want po-2 only, the filter kept in its field:\n%s", code, page)
	}
	code, page = br.get("/instances/purchase-order/po-3")
	if code != http.StatusOK || !strings.Contains(page, `id="attributes"`) || !strings.Contains(page, "&lt;script&gt;alert(&#34;po&#34;)&lt;/script&gt;") || strings.Contains(page, hostileSupplier) {
		t.Errorf("detail of po-3: status %d; want its hostile supplier shown escaped:\n%s", code, page)
	}
	code, page = br.get("/instances?attr=" + url.QueryEscape("supplier=a\x00b"))
	if code != http.StatusBadRequest || !strings.Contains(page, "attribute filter") {
		t.Errorf("instances with a NUL in the attribute filter: status %d; want 400 with the reason:\n%s", code, page)
	}
}
