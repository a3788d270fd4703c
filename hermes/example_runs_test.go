package hermes_test

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/hermes-bridge/hermes-bridge/hermes"
	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
)

// A governed run against the fake Hermes: start, follow the events once, read the final
// status; a re-attach to the events is ErrRunNotFound, so a restarted caller polls the status.
func ExampleClient_RunStart() {
	fake := hermestest.NewServer(hermestest.WithRunsIdempotency())
	defer fake.Close()
	c, _ := hermes.New(fake.URL, hermes.WithAPIKey(fake.APIKey()))
	ctx := context.Background()

	caps, _ := c.Capabilities(ctx)
	fmt.Println("durable idempotency:", caps.DurableRunIdempotency())
	st, err := c.RunStart(ctx, hermes.Request{Input: map[string]any{"input": "Hello run"}, IdempotencyKey: "act-42"})
	if err != nil {
		panic(err)
	}
	es, err := c.RunEvents(ctx, st.RunID)
	if err != nil {
		panic(err)
	}
	for {
		ev, err := es.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s (%s) %q\n", ev.Name, ev.Kind, ev.Delta+ev.Output)
	}
	es.Close()
	rs, _ := c.RunStatus(ctx, st.RunID)
	fmt.Println(rs.Status, *rs.Output)
	_, err = c.RunEvents(ctx, st.RunID)
	fmt.Println("re-attach:", errors.Is(err, hermes.ErrRunNotFound))
	again, _ := c.RunStart(ctx, hermes.Request{Input: map[string]any{"input": "Hello run"}, IdempotencyKey: "act-42"})
	fmt.Println("replayed:", again.Replayed, again.RunID == st.RunID, fake.RunsStartedFor("act-42"))
	// Output:
	// durable idempotency: true
	// message.delta (data) "stub"
	// message.delta (data) " reply:"
	// message.delta (data) " Hello"
	// message.delta (data) " run"
	// reasoning.available (thought) ""
	// run.completed (done) "stub reply: Hello run"
	// completed stub reply: Hello run
	// re-attach: true
	// replayed: true true 1
}
