package kvstore

import (
	"context"
	"testing"
	"time"
)

// TestRequestBounds: every request is bounded by OpTimeout (a publish by its
// publishTimeout), with no timer of its own where the caller's deadline comes first.
func TestRequestBounds(t *testing.T) {
	bg := context.Background()
	if ctx, cancel := opCtx(bg); ctx != bg {
		t.Errorf("opCtx without a deadline made a new context")
	} else {
		cancel()
	}

	far, cancelFar := context.WithTimeout(bg, time.Hour)
	defer cancelFar()
	ctx, cancel := opCtx(far)
	if d, ok := ctx.Deadline(); !ok || time.Until(d) > OpTimeout {
		t.Errorf("opCtx under a deadline an hour away: deadline %v %v, want within %s", d, ok, OpTimeout)
	}
	cancel()
	if ctx.Err() == nil || far.Err() != nil {
		t.Errorf("cancel of opCtx's context: %v, parent %v", ctx.Err(), far.Err())
	}

	near, cancelNear := context.WithTimeout(bg, OpTimeout/2)
	defer cancelNear()
	if ctx, cancel := opCtx(near); ctx != near {
		t.Errorf("opCtx under a deadline within OpTimeout made a new context")
	} else {
		cancel()
		if near.Err() != nil {
			t.Errorf("opCtx's cancel ended its caller's context")
		}
	}

	l := &JetStreamLog{publishTimeout: time.Second}
	for _, c := range []struct {
		name string
		ctx  context.Context
	}{{"no deadline", bg}, {"an hour away", far}, {"2.5 s away", near}} {
		ctx, cancel := l.publishCtx(c.ctx)
		if d, ok := ctx.Deadline(); !ok || time.Until(d) > l.publishTimeout {
			t.Errorf("publishCtx, %s: deadline %v %v, want within %s", c.name, d, ok, l.publishTimeout)
		}
		cancel()
	}
	soon, cancelSoon := context.WithTimeout(bg, l.publishTimeout/2)
	defer cancelSoon()
	if ctx, _ := l.publishCtx(soon); ctx != soon {
		t.Errorf("publishCtx under a deadline within publishTimeout made a new context")
	}
}
