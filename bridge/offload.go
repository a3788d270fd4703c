package bridge

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"

	"github.com/hermes-bridge/hermes-bridge/events"
)

// outputMargin is left free in every message and KV record for headers and the record
// envelope around a stored result.
const outputMargin = 16 << 10

// outputLimit is the largest event or result body the bridge publishes inline, given
// the server's max payload and the bucket's max value size.
func outputLimit(maxPayload, maxValue int) int {
	limit := maxPayload
	if maxValue > 0 {
		limit = min(limit, maxValue)
	}
	return max(limit-outputMargin, 1024)
}

// encodeResult encodes the result message of r. When it exceeds the limit, the output
// moves into the object store and a reference takes its place (schemas/README.md, "Results": nothing is
// dropped). The body is also what the KV record stores.
func (d *driver) encodeResult(ctx context.Context, r *events.Result) (nats.Header, []byte, error) {
	h, body, err := events.EncodeResult(d.b.cfg.Source, r, d.trace)
	if err != nil || len(body) <= d.b.maxOut {
		return h, body, err
	}
	ref, err := d.b.putObject(ctx, d.id+"/result", r.Output)
	if err != nil {
		return nil, nil, err
	}
	small := *r
	small.Output = ref.JSON()
	return events.EncodeResult(d.b.cfg.Source, &small, d.trace)
}

// offloadEvent stores an event too large for one message and returns the stand-in
// that is published instead: same action id, sequence and kind, event.data a reference
// to the whole stored event.
func (p *eventPublisher) offloadEvent(ctx context.Context, d *events.EventData) (*events.EventData, error) {
	full, err := json.Marshal(d)
	if err != nil {
		return nil, err
	}
	name := p.d.id + "/events/" + strconv.FormatInt(d.Sequence, 10)
	ref, err := p.d.b.putObject(ctx, name, full)
	if err != nil {
		return nil, err
	}
	return &events.EventData{ActionID: d.ActionID, Sequence: d.Sequence, Kind: d.Kind,
		Event: events.SSE{Event: d.Event.Event, ID: d.Event.ID, Data: ref.JSON()}}, nil
}

func (b *Bridge) putObject(ctx context.Context, name string, content []byte) (events.Ref, error) {
	if _, err := b.objects.PutBytes(ctx, name, content); err != nil {
		return events.Ref{}, fmt.Errorf("store %s in object store %s: %w", name, b.cfg.ObjectBucket, err)
	}
	return events.NewRef(b.cfg.ObjectBucket, name, content), nil
}
