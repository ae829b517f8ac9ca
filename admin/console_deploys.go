package admin

import (
	"errors"
	"fmt"
	"net/http"
	"time"
)

// deploysView is the Deploys page.
type deploysView struct {
	*Deploys
	// Problem says why the page has nothing to show; Notes what it lacks.
	Problem string
	Notes   []string
	// Verdict sums the check up; "" without a check.
	Verdict string
	// LiveTotal counts the live sagas of every type.
	LiveTotal int64
	// Took is how long the read and the check took, as text.
	Took string
}

func (c *console) pageDeploys(w http.ResponseWriter, r *http.Request) {
	started := time.Now()
	ctx, cancel := c.storeCtx(r)
	defer cancel()
	d, err := c.readDeploys(ctx, started)
	switch {
	case errors.Is(err, errNoDeploys):
		c.render(w, r, http.StatusOK, "deploys", "Deploys", &deploysView{Deploys: &Deploys{ReadAt: started},
			Problem: "This store neither counts its live sagas nor keeps the definitions engines ran: there is nothing to show about deploys. Run idem deploy check against a store that does (pgstore, sqlitestore)."})
		return
	case err != nil:
		c.storeFailed(w, r, "read deploys", err)
		return
	}
	v := &deploysView{Deploys: d, Notes: deployNotes(d), Took: lagText(time.Since(started).Seconds())}
	for _, t := range d.SagaTypes {
		v.LiveTotal += t.Live
	}
	if ch := d.Check; ch != nil {
		v.Verdict = fmt.Sprintf("Safe to deploy: no hazard, %d notice(s).", len(ch.Notices))
		if !ch.OK() {
			v.Verdict = fmt.Sprintf("Not safe to deploy: %d hazard(s), %d notice(s).", len(ch.Hazards), len(ch.Notices))
		}
	}
	c.render(w, r, http.StatusOK, "deploys", "Deploys", v)
}

// deployNotes says what the page cannot show, and why.
func deployNotes(d *Deploys) []string {
	var out []string
	if len(d.Machines) == 0 {
		out = append(out, "The engine serving this console registers no saga machine (an idem serve without them), so no deploy check runs here: run idem deploy check with the new build. The definitions, replicas and live counts below are what the store holds.")
	}
	if d.Census == nil {
		out = append(out, "This store cannot count its live sagas (it is no readmodel.Censuser): no live counts, and no deploy check.")
	}
	if !d.Registry {
		out = append(out, "This store keeps no definition registry (it is no store.DefinitionStore): the definitions listed are those the replicas' heartbeats name, without when they were first and last seen.")
	}
	return out
}
