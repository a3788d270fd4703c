package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/hermes-bridge/hermes-bridge/bridge/client"
	"github.com/hermes-bridge/hermes-bridge/events"
)

type kind int

const (
	kChat   kind = iota // unsafe chat with its own idempotency key
	kStream             // unsafe chat_stream with its own idempotency key
	kModels             // safe read
	kDupKey             // same key and input as an earlier chat or chat_stream of the round
	kRun                // a governed run with its own idempotency key
	kinds
)

var kindNames = [kinds]string{"chat", "chat_stream", "models", "dup_key", "run"}

// action is one planned action; everything about it follows from (seed, round, index).
type action struct {
	i     int
	kind  kind
	id    string
	op    string
	key   string
	owner string // the action id its prompt names (an earlier one for kDupKey)
	input json.RawMessage
	// republish: the index of an earlier action of the round whose message is published
	// again (a raw copy without Nats-Msg-Id, which JetStream does not deduplicate) right
	// after this one; -1 for none.
	republish int
}

func actionID(round, i int) string { return fmt.Sprintf("r%d-%06d", round, i) }

func plan(seed uint64, round, i int) action {
	rng := rand.New(rand.NewPCG(seed, uint64(round)<<32|uint64(i)))
	a := action{i: i, id: actionID(round, i), republish: -1}
	x := rng.Float64()
	switch {
	case x < 0.10 && i > 0:
		// ~10%: the key and input of an earlier keyed action, often one still in flight.
		for j := i - 1 - rng.IntN(min(i, 30)); j >= 0; j-- {
			if o := plan(seed, round, j); o.kind == kChat || o.kind == kStream {
				a.kind, a.op, a.key, a.owner, a.input = kDupKey, o.op, o.key, o.owner, o.input
				break
			}
		}
	case x < 0.20:
		a.kind, a.op = kRun, "run"
	case x < 0.50:
		a.kind, a.op = kChat, "chat"
	case x < 0.78:
		a.kind, a.op = kStream, "chat_stream"
	default:
		a.kind, a.op = kModels, "models"
		a.input = json.RawMessage(`{}`)
	}
	if a.op == "" { // a duplicate with nothing before it to duplicate
		a.kind, a.op = kChat, "chat"
	}
	if (a.kind == kChat || a.kind == kStream) && a.input == nil {
		a.key = "k-" + a.id
		a.owner = a.id
		a.input = json.RawMessage(`{"prompt":"chaos ` + a.id + `"}`)
	}
	if a.kind == kRun {
		a.key, a.owner = "k-"+a.id, a.id
		a.input = json.RawMessage(`{"input":"chaos ` + a.id + `"}`)
	}
	if rng.Float64() < 0.03 && i > 0 { // ~3%: an earlier action id published again
		a.republish = i - 1 - rng.IntN(min(i, 50))
	}
	return a
}

// load publishes one round's actions at a steady rate until stopped.
type load struct {
	w     *world
	round int
	start time.Time

	next      atomic.Int64
	mu        sync.Mutex
	actions   []action // by index; i == -1: an index taken but never published
	published map[string]time.Time
	messages  int
	retries   int
}

func (l *load) publisher(stop <-chan struct{}) error {
	for {
		i := int(l.next.Add(1) - 1)
		at := l.start.Add(time.Duration(float64(i) / l.w.opt.rate * float64(time.Second)))
		tm := time.NewTimer(time.Until(at))
		select {
		case <-tm.C:
		case <-stop:
			tm.Stop()
			return nil
		}
		a := plan(l.w.opt.seed, l.round, i)
		l.mu.Lock()
		for len(l.actions) <= i {
			l.actions = append(l.actions, action{i: -1})
		}
		l.actions[i] = a
		l.published[a.id] = time.Now()
		l.mu.Unlock()
		if err := l.publish(a); err != nil {
			return fmt.Errorf("action %s (%s): %w", a.id, kindNames[a.kind], err)
		}
	}
}

// publish publishes a (and a re-published copy of an earlier action), retrying a failed
// publish with the same Nats-Msg-Id: a publish whose ack was lost is stored once.
func (l *load) publish(a action) error {
	timeout := int64(10 * time.Minute / time.Millisecond) // a backlog must not expire actions
	act := events.Action{Input: a.input, IdempotencyKey: a.key, TimeoutMS: &timeout}
	if err := l.retry(func(ctx context.Context) error {
		_, err := l.w.client.Publish(ctx, "primary", a.op, act, client.WithActionID(a.id))
		return err
	}); err != nil {
		return err
	}
	if a.republish < 0 {
		return nil
	}
	o := plan(l.w.opt.seed, l.round, a.republish)
	data, err := json.Marshal(events.Action{Input: o.input, IdempotencyKey: o.key, TimeoutMS: &timeout})
	if err != nil {
		return err
	}
	hdr := nats.Header{}
	hdr.Set("ce-specversion", "1.0")
	hdr.Set("ce-id", o.id)
	hdr.Set("ce-source", "chaos-republish")
	hdr.Set("ce-type", events.TypeAction)
	hdr.Set("content-type", "application/json")
	return l.retry(func(ctx context.Context) error {
		_, err := l.w.js.PublishMsg(ctx, &nats.Msg{Subject: "hermes.actions.primary." + o.op, Header: hdr, Data: data})
		return err
	})
}

func (l *load) retry(f func(context.Context) error) error {
	delay := 20 * time.Millisecond
	deadline := time.Now().Add(3 * time.Minute) // a full cluster restart included
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := f(ctx)
		cancel()
		if err == nil {
			l.mu.Lock()
			l.messages++
			l.mu.Unlock()
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		l.mu.Lock()
		l.retries++
		l.mu.Unlock()
		time.Sleep(delay)
		delay = min(2*delay, time.Second)
	}
}

// all returns the published actions.
func (l *load) all() []action {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []action
	for _, a := range l.actions {
		if a.i >= 0 {
			out = append(out, a)
		}
	}
	return out
}

func (l *load) publishedAt(id string) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.published[id]
}
