package client

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hermes-bridge/hermes-bridge/events"
)

// Fetch reads the content ref names from js's object store and checks its size and
// digest (events.Ref.Check). Errors wrap events.ErrRef.
func Fetch(ctx context.Context, js jetstream.JetStream, ref events.Ref) ([]byte, error) {
	os, err := js.ObjectStore(ctx, ref.Bucket)
	if err != nil {
		return nil, fmt.Errorf("%w: object store %q: %w", events.ErrRef, ref.Bucket, err)
	}
	b, err := os.GetBytes(ctx, ref.Name)
	if err != nil {
		return nil, fmt.Errorf("%w: object %q: %w", events.ErrRef, ref.Name, err)
	}
	if err := ref.Check(b); err != nil {
		return nil, err
	}
	return b, nil
}

// ResolveResult replaces a referenced output of r with the stored output (Fetch).
func ResolveResult(ctx context.Context, js jetstream.JetStream, r *events.Result) error {
	ref, ok := events.ParseRef(r.Output)
	if !ok {
		return nil
	}
	b, err := Fetch(ctx, js, ref)
	if err != nil {
		return err
	}
	r.Output = b
	return nil
}

// ResolveEvent returns the stored event when ev stands in for one (its event.data is a
// reference object; its action id, sequence and kind are the stored event's), else ev.
// Errors wrap events.ErrRef.
func ResolveEvent(ctx context.Context, js jetstream.JetStream, ev *events.EventData) (*events.EventData, error) {
	ref, ok := events.ParseRef(ev.Event.Data)
	if !ok {
		return ev, nil
	}
	b, err := Fetch(ctx, js, ref)
	if err != nil {
		return nil, err
	}
	var full events.EventData
	if err := json.Unmarshal(b, &full); err != nil {
		return nil, fmt.Errorf("%w: stored event is not an event object", events.ErrRef)
	}
	return &full, nil
}
