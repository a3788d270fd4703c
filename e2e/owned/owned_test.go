package owned_test

import (
	"context"
	"runtime/pprof"
	"sync"
	"testing"

	"github.com/hermes-bridge/hermes-bridge/e2e/owned"
)

// TestGoroutines: the goroutines started under a label, and the ones they start, are
// counted; others and other values of the label are not.
func TestGoroutines(t *testing.T) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	park := func() { defer wg.Done(); <-stop }
	wg.Add(4)
	go park() // no label
	pprof.Do(context.Background(), pprof.Labels("owner", "a"), func(context.Context) {
		go park()
		go func() {
			defer wg.Done()
			wg.Add(1)
			go park() // inherits owner=a
			<-stop
		}()
	})
	pprof.Do(context.Background(), pprof.Labels("owner", "b"), func(context.Context) { go park() })
	defer func() { close(stop); wg.Wait() }()
	for value, want := range map[string]int{"a": 3, "b": 1, "c": 0} {
		for { // the grandchild starts a moment later
			got, err := owned.Goroutines("owner", value)
			if err != nil {
				t.Fatal(err)
			}
			if got == want {
				break
			}
			if got > want {
				t.Fatalf("owner=%s: %d goroutines, want %d", value, got, want)
			}
		}
	}
}
