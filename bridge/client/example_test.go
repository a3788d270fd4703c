package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/hermes-bridge/hermes-bridge/bridge"
	"github.com/hermes-bridge/hermes-bridge/bridge/client"
	"github.com/hermes-bridge/hermes-bridge/bridge/natsembed"
	"github.com/hermes-bridge/hermes-bridge/events"
	"github.com/hermes-bridge/hermes-bridge/hermes/hermestest"
)

// Publish one chat_stream action and follow it to its result, against a bridge that
// runs in the same process with an embedded NATS server and the fake Hermes. In a real
// program, NATS and the bridge are already running: keep the part from jetstream.New.
func ExampleClient() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// NATS with JetStream, the fake Hermes and the bridge between them.
	dir, _ := os.MkdirTemp("", "hermes-example")
	defer os.RemoveAll(dir)
	srv, err := natsembed.Start(natsembed.Options{Port: -1, StoreDir: dir})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	fake := hermestest.NewServer()
	defer fake.Close()
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	b, err := bridge.New(nc, bridge.Config{Provision: true, Endpoints: []bridge.Endpoint{
		{ID: "primary", BaseURL: fake.URL, Key: fake.APIKey}}}, zerolog.Nop())
	if err != nil {
		log.Fatal(err)
	}
	bctx, stopBridge := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- b.Run(bctx) }()
	defer func() { stopBridge(); <-stopped }()
	select {
	case <-b.Ready(): // provisioned: the streams exist
	case err := <-stopped:
		log.Fatal(err)
	}

	// Publish an action, then follow it: every event in order, then the result.
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	c := client.New(js) // WithSubjects, WithOutputStream: the bridge's prefix and stream
	id, err := c.Publish(ctx, "primary", "chat_stream",
		events.Action{Input: json.RawMessage(`{"prompt":"Summarize the incident notes."}`)},
		client.WithActionID("incident-42"))
	if err != nil {
		log.Fatal(err)
	}
	res, err := c.Follow(ctx, id, func(ev *events.EventData) error {
		fmt.Print(ev.Text) // the assistant text each event adds, as it arrives
		return nil
	}, nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println()
	fmt.Println(res.ActionID, res.Status)
	// Output:
	// stub reply: Summarize the incident notes.
	// incident-42 completed
}
