package bridge

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// TestNATSLiveness: the ping interval is an eighth of the lease, held between 250ms
// and 10s; two pings may go unanswered, so a dead server is given up after three
// intervals; the reconnect wait is one interval, at most 1s, plus a tenth of jitter.
func TestNATSLiveness(t *testing.T) {
	for _, c := range []struct {
		lease, ping, detect, wait time.Duration
	}{
		{100 * time.Millisecond, 250 * time.Millisecond, 750 * time.Millisecond, 250 * time.Millisecond}, // clamped up
		{2 * time.Second, 250 * time.Millisecond, 750 * time.Millisecond, 250 * time.Millisecond},        // ack wait 1s
		{6 * time.Second, 750 * time.Millisecond, 2250 * time.Millisecond, 750 * time.Millisecond},       // ack wait 3s
		{12 * time.Second, 1500 * time.Millisecond, 4500 * time.Millisecond, time.Second},                // ack wait 6s
		{60 * time.Second, 7500 * time.Millisecond, 22500 * time.Millisecond, time.Second},               // the default
		{80 * time.Second, 10 * time.Second, 30 * time.Second, time.Second},
		{20 * time.Minute, 10 * time.Second, 30 * time.Second, time.Second}, // clamped down
	} {
		l := NATSLiveness(c.lease)
		if l.PingInterval != c.ping || l.MaxPingsOut != 2 || l.DeadServerDetection() != c.detect ||
			l.ReconnectWait != c.wait || l.ReconnectJitter != c.wait/10 || l.ReconnectDelay() != c.wait+c.wait/10 {
			t.Errorf("lease %s: %+v, detection %s; want ping %s, detection %s, wait %s", c.lease, l, l.DeadServerDetection(), c.ping, c.detect, c.wait)
		}
	}
}

// TestLivenessOptions: Options sets the connection's ping and reconnect settings, and
// a zero jitter keeps nats.go's.
func TestLivenessOptions(t *testing.T) {
	apply := func(l Liveness) nats.Options {
		o := nats.GetDefaultOptions()
		for _, f := range l.Options() {
			noErr(t, f(&o))
		}
		return o
	}
	o := apply(NATSLiveness(12 * time.Second))
	if o.PingInterval != 1500*time.Millisecond || o.MaxPingsOut != 2 || o.ReconnectWait != time.Second ||
		o.ReconnectJitter != 100*time.Millisecond || o.ReconnectJitterTLS != 100*time.Millisecond {
		t.Errorf("options %+v", o)
	}
	d := nats.GetDefaultOptions()
	o = apply(Liveness{PingInterval: 10 * time.Second, MaxPingsOut: 2, ReconnectWait: time.Second})
	if o.ReconnectJitter != d.ReconnectJitter || o.ReconnectJitterTLS != d.ReconnectJitterTLS {
		t.Errorf("zero jitter: %s/%s, want nats.go's %s/%s", o.ReconnectJitter, o.ReconnectJitterTLS, d.ReconnectJitter, d.ReconnectJitterTLS)
	}
}

// TestRenewalGap: 5/4 heartbeat + detection + reconnect delay + the store request.
func TestRenewalGap(t *testing.T) {
	for _, c := range []struct {
		heartbeat, lease, request, want time.Duration
	}{
		// The default: 12.5 + 22.5 + 1.1 + 5 = 41.1s, within the 60s lease.
		{10 * time.Second, time.Minute, 5 * time.Second, 41100 * time.Millisecond},
		// The review's case, ack wait 6s: 2.5 + 4.5 + 1.1 + 5 = 13.1s, over the 12s lease.
		{2 * time.Second, 12 * time.Second, 5 * time.Second, 13100 * time.Millisecond},
		// Ack wait 1s, renewal within a ping interval: 0.41625 + 0.75 + 0.275 + 0.25.
		{333 * time.Millisecond, 2 * time.Second, 250 * time.Millisecond, 1691250 * time.Microsecond},
	} {
		if got := RenewalGap(c.heartbeat, c.lease, c.request); got != c.want {
			t.Errorf("RenewalGap(%s, %s, %s) = %s, want %s", c.heartbeat, c.lease, c.request, got, c.want)
		}
	}
}

// TestConfigLeaseBudget: Validate refuses a lease that cannot hold the renewal gap (with
// the renewal answered within a ping interval), naming the settings and the formula, and
// accepts the default lease with the ack waits and heartbeats the project's tests use.
func TestConfigLeaseBudget(t *testing.T) {
	for _, c := range []struct {
		ackWait, heartbeat, lease time.Duration
	}{
		{time.Second, 0, 0},
		{time.Second, 300 * time.Millisecond, 0},
		{time.Second, 500 * time.Millisecond, 0},
		{2 * time.Second, 0, 0},
		{3 * time.Second, time.Second, 0},
		{3 * time.Second, 1500 * time.Millisecond, 0},
		{5 * time.Second, 0, 0},
		{30 * time.Second, 0, 0},
		{30 * time.Second, 15 * time.Second, 0},
		{time.Hour, 0, 0},
		{3 * time.Second, time.Second, 4 * time.Second}, // 1.25 + 1.5 + 0.55 + 0.5 = 3.8s
	} {
		cfg := validConfig()
		cfg.AckWait, cfg.Heartbeat, cfg.Lease = c.ackWait, c.heartbeat, c.lease
		cfg.IdempotencyTTL, cfg.OutputMaxAge = 48*time.Hour, 48*time.Hour
		if err := cfg.WithDefaults().Validate(); err != nil {
			t.Errorf("ack wait %s, heartbeat %s, lease %s: %v", c.ackWait, c.heartbeat, c.lease, err)
		}
	}
	for _, c := range []struct {
		ackWait, heartbeat, lease time.Duration
		want                      string
	}{
		{3 * time.Second, time.Second, 3 * time.Second, "Lease: must hold what a claim may go unrenewed when a NATS server stops answering: " +
			"5/4 × Heartbeat (1s) + dead-server detection 1.125s (3 × ping interval 375ms, lease/8 within 250ms to 10s) + reconnect wait 413ms + " +
			"the renewal, one ping interval = 3.163s"},
		{30 * time.Second, 15 * time.Second, 30 * time.Second, "Lease: must hold"},
		{time.Second, 500 * time.Millisecond, time.Second, "Lease: must hold"},
	} {
		cfg := validConfig()
		cfg.AckWait, cfg.Heartbeat, cfg.Lease = c.ackWait, c.heartbeat, c.lease
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ack wait %s, heartbeat %s, lease %s: %v, want %q", c.ackWait, c.heartbeat, c.lease, err, c.want)
		}
	}
}
