package main

// What the image is: the same entrypoint, command, user, ports, environment, working
// directory, volume and labels as the final stage of deploy/Dockerfile.
// image_test.go parses that stage and fails when the two differ.

const (
	// binaryPath is where the binary lives in the image, and the entrypoint.
	binaryPath = "/hermes-bridge"
	// uid and gid are distroless's "nonroot" user, the user the bridge runs as.
	uid = 65532
	gid = 65532
	// user is the image config's User: numeric, so a runtime can check runAsNonRoot
	// without reading /etc/passwd.
	user = "65532:65532"
	// opsPort is the port of the operations listener (HERMES_BRIDGE_HTTP_ADDR's default
	// port in cmd/hermes-bridge/config.go, DefaultHTTPAddr).
	opsPort = "9464"
	// dataDir is the working directory and volume: writable by uid, it holds the
	// embedded NATS server's store when NATS_URL is unset (a try-out).
	dataDir = "/data"
	// caFile is where the CA certificates are, as in distroless and Debian.
	caFile = "/etc/ssl/certs/ca-certificates.crt"
	// source is the repository, for the org.opencontainers.image.source label.
	source = "https://github.com/hermes-bridge/hermes-bridge"
)

// entrypoint and cmd: `docker run IMAGE` runs the service, `docker run IMAGE version`
// any other subcommand.
var (
	entrypoint = []string{binaryPath}
	cmd        = []string{"run"}
)

// imageEnv is the image's environment. PATH and SSL_CERT_FILE are what the distroless
// base of deploy/Dockerfile sets; the rest is set by the Dockerfile's final stage.
var imageEnv = []string{
	"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"SSL_CERT_FILE=" + caFile,
	// Probes and Prometheus reach the listener from outside the container (the
	// binary's default is loopback only).
	"HERMES_BRIDGE_HTTP_ADDR=:" + opsPort,
	"HERMES_BRIDGE_LOG_FORMAT=json",
	// The embedded server's store, used only without NATS_URL.
	"HERMES_BRIDGE_DATA_DIR=" + dataDir + "/nats",
}

// baseEnvKeys are the variables of imageEnv that the Dockerfile inherits from its base
// image instead of setting them itself.
var baseEnvKeys = map[string]bool{"PATH": true, "SSL_CERT_FILE": true}

// labels returns the image's labels for a version and a VCS revision. Both are always
// set, as the Dockerfile's LABEL sets them from its build arguments (an empty revision
// is an empty label).
func labels(version, revision string) map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":       "hermes-bridge",
		"org.opencontainers.image.description": "Bridges NATS JetStream to Hermes Agent API servers",
		"org.opencontainers.image.source":      source,
		"org.opencontainers.image.version":     version,
		"org.opencontainers.image.revision":    revision,
	}
}
