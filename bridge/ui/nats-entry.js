// The entry point of assets/nats.js: the parts of the official NATS JavaScript client
// (@nats-io/nats-core, @nats-io/jetstream; Apache-2.0) the dashboard uses, bundled and
// minified by esbuild (make ui-vendor; see README.md here).
export { wsconnect, headers, nanos, millis } from "@nats-io/nats-core";
export { jetstream, DeliverPolicy, AckPolicy } from "@nats-io/jetstream";
