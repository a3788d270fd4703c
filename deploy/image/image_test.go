package main

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"debug/elf"
	"encoding/binary"
	"encoding/json"
	"encoding/pem"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

// testVersion is stamped into the test binary and the labels.
const testVersion = "v0.0.0-imagetest"

// testEpoch is the fixed time of the test images.
const testEpoch = "1700000000"

var (
	binOnce sync.Once
	binDir  string
	binPath string
	binErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// hostBinary builds hermes-bridge for linux/GOARCH once, with the builder's own
// buildBinary (the flags of `make image`), and returns its path. Tests that need it
// are skipped with -short (like the other tests that build the real binary) and on a
// host that is not linux/amd64 or linux/arm64.
func hostBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: builds the hermes-bridge binary")
	}
	if _, ok := elfMachine[runtime.GOARCH]; !ok {
		t.Skipf("GOARCH %s: the image is built for amd64 and arm64 only", runtime.GOARCH)
	}
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "hermes-bridge-image-test-")
		if binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "hermes-bridge")
		// No wall-clock limit of its own: a loaded machine builds slowly. The build
		// ends with the test binary's deadline (go test -timeout), less a margin to
		// report it.
		ctx, cancel := untilDeadline(t)
		defer cancel()
		start := time.Now()
		root, err := moduleRoot()
		if binErr = err; err == nil {
			binErr = buildBinary(ctx, root, hostPlatform(), testVersion, binPath)
		}
		if binErr == nil {
			binBuildTime = time.Since(start)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	t.Logf("hermes-bridge built for %s in %v", hostPlatform(), binBuildTime.Round(time.Millisecond))
	return binPath
}

var binBuildTime time.Duration

// untilDeadline returns a context of t's that ends a little before the test binary's
// deadline (go test -timeout; a tenth of the time left, at most a minute, so that a
// build cut short fails the test with its output instead of a panic), or never.
func untilDeadline(t *testing.T) (context.Context, context.CancelFunc) {
	d, ok := t.Deadline()
	if !ok {
		return context.WithCancel(t.Context())
	}
	return context.WithDeadline(t.Context(), d.Add(-min(time.Until(d)/10, time.Minute)))
}

var (
	imgOnce                   sync.Once
	imgLayout, imgTar, imgOut string
	imgFailed                 bool
)

// hostImage builds the image of hostBinary once, with the test's fixed version,
// revision and epoch, as a layout and an archive under the binary's directory, and
// returns their paths and the command's output.
func hostImage(t *testing.T) (layoutDir, archive, out string) {
	t.Helper()
	bin := hostBinary(t)
	imgOnce.Do(func() {
		imgFailed = true
		imgLayout, imgTar = filepath.Join(binDir, "layout"), filepath.Join(binDir, "image.tar")
		imgOut = buildCLI(t, "-binary", bin, "-platforms", hostPlatform().String(), "-layout", imgLayout, "-o", imgTar)
		imgFailed = false
	})
	if imgFailed {
		t.Fatal("building the test image failed (see the first test that built it)")
	}
	return imgLayout, imgTar, imgOut
}

func hostPlatform() v1.Platform {
	p, err := parsePlatform("linux/" + runtime.GOARCH)
	if err != nil {
		panic(err) // hostBinary checked GOARCH first
	}
	return p
}

// buildCLI runs the command with args plus a fixed version, revision and epoch, and
// fails the test unless it exits 0.
func buildCLI(t *testing.T, args ...string) string {
	t.Helper()
	args = append([]string{"-version", testVersion, "-revision", "0123456789abcdef0123456789abcdef01234567", "-epoch", testEpoch}, args...)
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), args, &stdout, &stderr); code != 0 {
		t.Fatalf("image %s: exit %d\n%s%s", strings.Join(args, " "), code, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// readLayout opens the OCI layout in dir with the library, validates it (every blob's
// digest and size, each config's diff_ids and platform against its descriptor, the
// media types), checks its one entry in index.json, and returns that entry and every
// platform's image (through an image index when there is one).
func readLayout(t *testing.T, dir string) (top v1.Descriptor, images []v1.Image) {
	t.Helper()
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := validate.Index(idx); err != nil {
		t.Fatalf("layout %s: %v", dir, err)
	}
	m, err := idx.IndexManifest()
	if err != nil || m.SchemaVersion != 2 || m.MediaType != types.OCIImageIndex || len(m.Manifests) != 1 {
		t.Fatalf("index.json = %+v (%v)", m, err)
	}
	top = m.Manifests[0]
	descs, from := []v1.Descriptor{top}, idx
	switch top.MediaType {
	case types.OCIImageIndex:
		if from, err = idx.ImageIndex(top.Digest); err != nil {
			t.Fatal(err)
		}
		inner, err := from.IndexManifest()
		if err != nil || len(inner.Manifests) == 0 {
			t.Fatalf("image index: %+v (%v)", inner, err)
		}
		descs = inner.Manifests
	case types.OCIManifestSchema1:
	default:
		t.Fatalf("index.json points at a %s", top.MediaType)
	}
	for _, d := range descs {
		if d.MediaType != types.OCIManifestSchema1 || d.Platform == nil {
			t.Fatalf("manifest descriptor %+v: want an OCI manifest with a platform", d)
		}
		img, err := from.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		im, err := img.Manifest()
		if err != nil || im.Config.MediaType != types.OCIConfigJSON || len(im.Layers) != 1 || im.Layers[0].MediaType != types.OCILayer {
			t.Fatalf("manifest %s: %+v (%v)", d.Digest, im, err)
		}
		images = append(images, img)
	}
	return top, images
}

// layerFiles reads the one layer of img.
func layerFiles(t *testing.T, img v1.Image) map[string]tarEntry {
	t.Helper()
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("%d layers (%v)", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return readTar(t, data)
}

// configFile is img's config.
func configFile(t *testing.T, img v1.Image) *v1.ConfigFile {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	return cf
}

// tarEntry is one entry of a tar archive with its content.
type tarEntry struct {
	hdr  *tar.Header
	data []byte
}

func readTar(t *testing.T, data []byte) map[string]tarEntry {
	t.Helper()
	out := map[string]tarEntry{}
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimSuffix(path.Clean("/"+h.Name), "/")
		if _, dup := out[name]; dup {
			t.Fatalf("tar entry %s twice", name)
		}
		out[name] = tarEntry{h, b}
	}
}

// opsPortFromCode is the port of DefaultHTTPAddr in cmd/hermes-bridge/config.go (a
// constant of package main, so read from the source rather than imported).
func opsPortFromCode(t *testing.T) string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "../../cmd/hermes-bridge/config.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var addr string
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok || len(vs.Names) != 1 || vs.Names[0].Name != "DefaultHTTPAddr" || len(vs.Values) != 1 {
			return true
		}
		if lit, ok := vs.Values[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
			addr, _ = strconv.Unquote(lit.Value)
		}
		return false
	})
	if addr == "" {
		t.Fatal("cmd/hermes-bridge/config.go has no string constant DefaultHTTPAddr")
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("DefaultHTTPAddr %q: %v", addr, err)
	}
	return port
}

// TestImage builds the image for the host platform from the real binary and checks
// everything a runtime relies on: the layout's digests, sizes and media types, the
// config (entrypoint, command, non-root user, the operations port, environment), the
// layer (the static binary, no shell, the nonroot user, a writable /data, the CA
// roots), the binary's stamped version, and that the archive holds the same files as
// the layout.
func TestImage(t *testing.T) {
	lay, archive, out := hostImage(t)
	t.Logf("%s", out)
	dir := t.TempDir()

	top, images := readLayout(t, lay)
	if len(images) != 1 || top.MediaType != types.OCIManifestSchema1 {
		t.Fatalf("one platform: index.json should name its manifest; got %s with %d images", top.MediaType, len(images))
	}
	if top.Annotations[annotationRefName] != testVersion || top.Annotations[annotationContainerName] != "docker.io/library/hermes-bridge:"+testVersion {
		t.Errorf("index.json annotations %v", top.Annotations)
	}
	if !strings.Contains(out, top.Digest.String()) {
		t.Errorf("output does not name the digest %s", top.Digest)
	}
	img := images[0]
	cf := configFile(t, img)
	c := cf.Config

	// Config.
	if !slices.Equal(c.Entrypoint, []string{"/hermes-bridge"}) || !slices.Equal(c.Cmd, []string{"run"}) {
		t.Errorf("Entrypoint %q, Cmd %q; want [/hermes-bridge] [run]", c.Entrypoint, c.Cmd)
	}
	uidText, _, _ := strings.Cut(c.User, ":")
	if n, err := strconv.Atoi(uidText); err != nil || n == 0 {
		t.Errorf("User %q: want a numeric non-root uid", c.User)
	}
	port := opsPortFromCode(t)
	if want := map[string]struct{}{port + "/tcp": {}}; !maps.Equal(c.ExposedPorts, want) {
		t.Errorf("ExposedPorts %v, want %v (the port of DefaultHTTPAddr)", c.ExposedPorts, want)
	}
	if !slices.Contains(c.Env, "HERMES_BRIDGE_HTTP_ADDR=:"+port) || !slices.Contains(c.Env, "HERMES_BRIDGE_LOG_FORMAT=json") {
		t.Errorf("Env %q", c.Env)
	}
	if cf.OS != "linux" || cf.Architecture != runtime.GOARCH {
		t.Errorf("config platform %s/%s", cf.OS, cf.Architecture)
	}
	epoch := time.Unix(1700000000, 0)
	if !cf.Created.Equal(epoch) || len(cf.History) != 1 || !cf.History[0].Created.Equal(epoch) {
		t.Errorf("created %v, history %+v, want %v", cf.Created, cf.History, epoch)
	}
	if c.Labels["org.opencontainers.image.version"] != testVersion || c.Labels["org.opencontainers.image.source"] != source {
		t.Errorf("labels %v", c.Labels)
	}

	// Layer.
	files := layerFiles(t, img)
	b, ok := files[binaryPath]
	if !ok || b.hdr.Typeflag != tar.TypeReg || b.hdr.Mode&0o777 != 0o755 {
		t.Fatalf("%s: want a regular file 0755 in the layer, got %+v", binaryPath, b.hdr)
	}
	for name, e := range files {
		if e.hdr.Typeflag == tar.TypeReg && e.hdr.Mode&0o111 != 0 && name != binaryPath {
			t.Errorf("%s is executable: the only program in the image is %s", name, binaryPath)
		}
		if e.hdr.Typeflag == tar.TypeSymlink || e.hdr.Typeflag == tar.TypeLink {
			t.Errorf("%s is a link", name)
		}
		switch path.Base(name) {
		case "sh", "bash", "dash", "ash", "zsh", "ksh", "busybox":
			t.Errorf("%s: a shell in the image", name)
		}
		if !e.hdr.ModTime.Equal(epoch) {
			t.Errorf("%s has time %v, want the epoch", name, e.hdr.ModTime)
		}
	}
	for _, d := range []string{"/bin", "/usr", "/sbin"} {
		if _, ok := files[d]; ok {
			t.Errorf("%s in the image", d)
		}
	}
	ef, err := elf.NewFile(bytes.NewReader(b.data))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ef.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary has a program interpreter (PT_INTERP): not static")
		}
	}
	if libs, err := ef.DynString(elf.DT_NEEDED); err != nil || len(libs) > 0 {
		t.Errorf("DT_NEEDED %v (%v): the binary needs shared libraries", libs, err)
	}
	ef.Close()
	if d := files[dataDir]; d.hdr == nil || d.hdr.Typeflag != tar.TypeDir || d.hdr.Uid != uid || d.hdr.Mode&0o200 == 0 {
		t.Errorf("%s: want a directory writable by %d, got %+v", dataDir, uid, d.hdr)
	}
	if d := files["/tmp"]; d.hdr == nil || d.hdr.Mode&0o1777 != 0o1777 {
		t.Errorf("/tmp: want mode 1777, got %+v", d.hdr)
	}
	if !regexp.MustCompile(`(?m)^nonroot:x:` + uidText + `:`).Match(files["/etc/passwd"].data) {
		t.Errorf("/etc/passwd has no nonroot user %s:\n%s", uidText, files["/etc/passwd"].data)
	}
	if !bytes.Contains(files["/etc/group"].data, []byte("nonroot:x:65532:")) {
		t.Errorf("/etc/group:\n%s", files["/etc/group"].data)
	}
	n := 0
	for rest := files[caFile].data; ; {
		var blk *pem.Block
		if blk, rest = pem.Decode(rest); blk == nil {
			break
		}
		if _, err := x509.ParseCertificate(blk.Bytes); err != nil {
			t.Fatalf("%s: %v", caFile, err)
		}
		n++
	}
	if n < 50 {
		t.Errorf("%s holds %d certificates", caFile, n)
	}

	// The binary runs and carries the stamped version.
	exe := filepath.Join(dir, "hermes-bridge")
	if err := os.WriteFile(exe, b.data, 0o755); err != nil {
		t.Fatal(err)
	}
	vout, err := exec.Command(exe, "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(vout), "hermes-bridge "+testVersion+" ") {
		t.Errorf("hermes-bridge version: %q (%v), want it to start with %q", vout, err, "hermes-bridge "+testVersion+" ")
	}

	// The archive is the layout, plus nothing else, every entry root's at the epoch.
	ab, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}
	for name, e := range readTar(t, ab) {
		if !e.hdr.ModTime.Equal(epoch) || e.hdr.Uid != 0 || e.hdr.Gid != 0 {
			t.Errorf("archive entry %s: time %v, owner %d:%d; want the epoch and 0:0", name, e.hdr.ModTime, e.hdr.Uid, e.hdr.Gid)
		}
		if e.hdr.Typeflag == tar.TypeDir {
			continue
		}
		want, err := os.ReadFile(filepath.Join(lay, filepath.FromSlash(name)))
		if err != nil || !bytes.Equal(want, e.data) {
			t.Errorf("archive entry %s differs from the layout (%v)", name, err)
		}
	}
	// What `docker load` reads with the classic image store: manifest.json names this
	// image and its tag, and the image it names is whole.
	checkDockerManifest(t, ab, img, "hermes-bridge:"+testVersion)
	layers, _ := img.Layers()
	size, _ := layers[0].Size()
	t.Logf("layer %d bytes compressed, archive %d bytes", size, len(ab))
}

// checkDockerManifest checks that the manifest.json of the archive ab names img with
// tag, and that the library reads that image from the archive as `docker load` would
// (config and layers by the paths manifest.json gives), its digests and diff_ids right.
func checkDockerManifest(t *testing.T, ab []byte, img v1.Image, tag string) {
	t.Helper()
	opener := func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(ab)), nil }
	dm, err := tarball.LoadManifest(opener)
	if err != nil || len(dm) != 1 {
		t.Fatalf("manifest.json: %+v (%v)", dm, err)
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if dm[0].Config != blobPath(m.Config.Digest) || !slices.Equal(dm[0].Layers, []string{blobPath(m.Layers[0].Digest)}) || !slices.Equal(dm[0].RepoTags, []string{tag}) {
		t.Errorf("manifest.json %+v does not name the image %s", dm[0], tag)
	}
	loaded, err := tarball.Image(opener, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := validate.Image(loaded); err != nil {
		t.Errorf("the image manifest.json names: %v", err)
	}
}

// TestImageMatchesDockerfile: the Go-built image config is what deploy/Dockerfile's
// final stage sets (USER, EXPOSE, ENTRYPOINT, CMD, ENV, WORKDIR, VOLUME, LABEL), its
// build stage uses the Go of go.mod and the same build flags, and the port is the
// default operations port of the code.
func TestImageMatchesDockerfile(t *testing.T) {
	df, stages, err := readFinalStage("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(df.from, "gcr.io/distroless/static") && df.from != "scratch" {
		t.Errorf("final stage FROM %s: want distroless static or scratch (no shell)", df.from)
	}
	if df.user != user {
		t.Errorf("USER %q, the Go image %q", df.user, user)
	}
	if !slices.Equal(df.expose, []string{opsPort + "/tcp"}) {
		t.Errorf("EXPOSE %q, the Go image %s/tcp", df.expose, opsPort)
	}
	if port := opsPortFromCode(t); port != opsPort {
		t.Errorf("the image exposes %s, DefaultHTTPAddr in cmd/hermes-bridge/config.go has port %s", opsPort, port)
	}
	if !slices.Equal(df.entrypoint, entrypoint) || !slices.Equal(df.cmd, cmd) {
		t.Errorf("ENTRYPOINT %q CMD %q, the Go image %q %q", df.entrypoint, df.cmd, entrypoint, cmd)
	}
	if df.workdir != dataDir || !slices.Equal(df.volumes, []string{dataDir}) {
		t.Errorf("WORKDIR %q VOLUME %q, the Go image %s", df.workdir, df.volumes, dataDir)
	}
	goEnv := map[string]string{}
	for _, kv := range imageEnv {
		k, v, _ := strings.Cut(kv, "=")
		if !baseEnvKeys[k] {
			goEnv[k] = v
		}
	}
	if !maps.Equal(df.env, goEnv) {
		t.Errorf("ENV %q, the Go image (less PATH and SSL_CERT_FILE, from the base) %q", df.env, goEnv)
	}
	if want := labels("${VERSION}", "${REVISION}"); !maps.Equal(df.labels, want) {
		t.Errorf("LABEL %q, the Go image %q", df.labels, want)
	}

	// The build stage: golang:<go.mod's go version> and the flags of buildBinary.
	gomod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(gomod)
	if m == nil {
		t.Fatal("go.mod has no go directive")
	}
	build := stages[0]
	if !strings.Contains(build.from, "golang:"+string(m[1])+" ") && !strings.HasSuffix(build.from, "golang:"+string(m[1])) {
		t.Errorf("build stage FROM %s, go.mod says go %s", build.from, m[1])
	}
	var runs strings.Builder
	for _, in := range build.instr {
		if in.cmd == "RUN" {
			runs.WriteString(in.args + "\n")
		}
	}
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "-buildvcs=false", `-ldflags "` + ldflagsPrefix + "${VERSION}" + `"`} {
		if !strings.Contains(runs.String(), want) {
			t.Errorf("the build stage's go build lacks %s", want)
		}
	}
}

// TestImageEnvIsConfiguration: every HERMES_ and NATS_ variable the image sets is a
// setting of cmd/hermes-bridge (an env tag of its Config), so none is misspelled.
func TestImageEnvIsConfiguration(t *testing.T) {
	src, err := os.ReadFile("../../cmd/hermes-bridge/config.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range imageEnv {
		k, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(k, "HERMES_") && !strings.HasPrefix(k, "NATS_") {
			continue
		}
		if !bytes.Contains(src, []byte(`env:"`+k+`"`)) {
			t.Errorf("the image sets %s, which cmd/hermes-bridge/config.go does not read", k)
		}
	}
}

// TestImageReproducible: a second build from the same binary, version, revision and
// epoch gives the same bytes (index.json, every blob, the archive), and so the same
// digest, as hostImage's; another epoch gives another digest.
func TestImageReproducible(t *testing.T) {
	lay1, tar1, _ := hostImage(t)
	dir := t.TempDir()
	lay2, tar2 := filepath.Join(dir, "layout"), filepath.Join(dir, "image.tar")
	buildCLI(t, "-binary", binPath, "-platforms", hostPlatform().String(), "-layout", lay2, "-o", tar2)
	read := func(p string) []byte {
		t.Helper()
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	i1, i2 := read(filepath.Join(lay1, "index.json")), read(filepath.Join(lay2, "index.json"))
	a1, a2 := read(tar1), read(tar2)
	if !bytes.Equal(i1, i2) || !bytes.Equal(a1, a2) {
		t.Errorf("two builds differ: index.json equal %v, archives equal %v\n%s\n%s", bytes.Equal(i1, i2), bytes.Equal(a1, a2), i1, i2)
	}
	var idx v1.IndexManifest
	if err := json.Unmarshal(i1, &idx); err != nil || len(idx.Manifests) != 1 {
		t.Fatalf("index.json: %s (%v)", i1, err)
	}
	s1, s2 := sha256.Sum256(a1), sha256.Sum256(a2)
	t.Logf("manifest %s twice; archive sha256 %x and %x", idx.Manifests[0].Digest, s1, s2)

	// The timestamps are in the image: a small stand-in binary, two epochs.
	fake := filepath.Join(dir, "fake")
	if err := os.WriteFile(fake, tinyELF(elfMachine[runtime.GOARCH], false), 0o755); err != nil {
		t.Fatal(err)
	}
	digest := func(epoch string) v1.Hash {
		d := filepath.Join(dir, "epoch-"+epoch)
		buildCLI(t, "-binary", fake, "-platforms", hostPlatform().String(), "-layout", d, "-o", "", "-epoch", epoch)
		top, _ := readLayout(t, d)
		return top.Digest
	}
	if digest(testEpoch) == digest("1700000001") {
		t.Error("another epoch gave the same digest: the timestamps are not in the image")
	}
}

// tinyELF is the smallest ELF64 executable debug/elf reads: a header and one PT_LOAD
// (plus a PT_INTERP when interp), for machine. It does not run; it stands in for a
// binary where a test checks the image's assembly, not the program.
func tinyELF(machine elf.Machine, interp bool) []byte {
	phnum := uint16(1)
	if interp {
		phnum = 2
	}
	size := uint64(64 + 56*int(phnum))
	hdr := elf.Header64{
		Type: uint16(elf.ET_EXEC), Machine: uint16(machine), Version: uint32(elf.EV_CURRENT),
		Entry: 0x400000, Phoff: 64, Ehsize: 64, Phentsize: 56, Phnum: phnum, Shentsize: 64,
	}
	copy(hdr.Ident[:], elf.ELFMAG)
	hdr.Ident[elf.EI_CLASS] = byte(elf.ELFCLASS64)
	hdr.Ident[elf.EI_DATA] = byte(elf.ELFDATA2LSB)
	hdr.Ident[elf.EI_VERSION] = byte(elf.EV_CURRENT)
	var buf bytes.Buffer
	_ = binary.Write(&buf, binary.LittleEndian, hdr)
	_ = binary.Write(&buf, binary.LittleEndian, elf.Prog64{Type: uint32(elf.PT_LOAD), Flags: uint32(elf.PF_R | elf.PF_X),
		Vaddr: 0x400000, Paddr: 0x400000, Filesz: size, Memsz: size, Align: 0x1000})
	if interp {
		_ = binary.Write(&buf, binary.LittleEndian, elf.Prog64{Type: uint32(elf.PT_INTERP), Flags: uint32(elf.PF_R)})
	}
	return buf.Bytes()
}

// TestImageMultiPlatform: with two platforms index.json names an image index listing
// one manifest per platform, each with its platform, a config of its architecture and
// the binary given for it, and manifest.json (Docker's classic load) names the first.
// The binaries are stand-ins (tinyELF): this checks the assembly; `make image`
// cross-compiles the real ones.
func TestImageMultiPlatform(t *testing.T) {
	dir := t.TempDir()
	plats := []v1.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64", Variant: "v8"}}
	var bins []string
	for _, p := range plats {
		b := filepath.Join(dir, "bin-"+p.Architecture)
		if err := os.WriteFile(b, tinyELF(elfMachine[p.Architecture], false), 0o755); err != nil {
			t.Fatal(err)
		}
		bins = append(bins, b)
	}
	ca, err := caBundle()
	if err != nil {
		t.Fatal(err)
	}
	img, err := buildImage(imageSpec{Platforms: plats, Binaries: bins,
		Version: testVersion, Created: time.Unix(1700000000, 0), Name: "hermes-bridge", Tag: "t", CACerts: ca})
	if err != nil {
		t.Fatal(err)
	}
	lay := filepath.Join(dir, "layout")
	if err := img.writeLayout(lay); err != nil {
		t.Fatal(err)
	}
	top, images := readLayout(t, lay)
	if top.MediaType != types.OCIImageIndex || len(images) != 2 {
		t.Fatalf("index.json names a %s of %d images, want an image index of 2", top.MediaType, len(images))
	}
	inner, err := img.index.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	for i, im := range images {
		p, cf := plats[i], configFile(t, im)
		if got := *inner.Manifests[i].Platform; !got.Equals(p) || cf.Architecture != p.Architecture || cf.Variant != p.Variant {
			t.Errorf("image %d: platform %s, config %s/%s; want %s", i, got, cf.Architecture, cf.Variant, p)
		}
		f, err := elf.NewFile(bytes.NewReader(layerFiles(t, im)[binaryPath].data))
		if err != nil {
			t.Fatal(err)
		}
		if f.Machine != elfMachine[p.Architecture] {
			t.Errorf("image %s holds a binary for %s", p, f.Machine)
		}
	}
	if _, err := buildImage(imageSpec{Platforms: plats, Binaries: []string{bins[1], bins[0]}, Name: "n", Tag: "t", CACerts: ca}); err == nil || !strings.Contains(err.Error(), "ELF machine") {
		t.Errorf("binaries swapped: %v, want an ELF machine error", err)
	}
	var ab bytes.Buffer
	if err := writeArchive(&ab, lay, time.Unix(1700000000, 0)); err != nil {
		t.Fatal(err)
	}
	checkDockerManifest(t, ab.Bytes(), images[0], "hermes-bridge:t")
}

// TestBadInput: wrong flags and wrong binaries are errors with a reason, never a panic
// or a broken image.
func TestBadInput(t *testing.T) {
	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-platforms", "linux/s390x"}, 2, "only linux/amd64 and linux/arm64"},
		{[]string{"-platforms", "windows/amd64"}, 2, "only linux"},
		{[]string{"-platforms", "amd64"}, 2, "want os/arch"},
		{[]string{"-platforms", "linux/amd64,linux/amd64"}, 2, "listed twice"},
		{[]string{"-binary", "x", "-platforms", "linux/amd64,linux/arm64"}, 2, "exactly one platform"},
		{[]string{"-o", ""}, 2, "nothing to write"},
		{[]string{"-epoch", "yesterday"}, 2, "Unix time"},
		{[]string{"-tag", "no:colons"}, 2, "not a valid image tag"},
		{[]string{"-version", "a b"}, 2, "must not hold spaces"},
		{[]string{"-name", "Hermes Bridge"}, 2, "not a valid image name"},
		{[]string{"stray"}, 2, "unexpected argument"},
		{[]string{"-layout", "."}, 2, "not empty"},
		{[]string{"-binary", "/nonexistent/hermes-bridge", "-platforms", "linux/amd64", "-o", filepath.Join(t.TempDir(), "x.tar")}, 1, "no such file"},
		{[]string{"-binary", "image_test.go", "-platforms", "linux/amd64", "-o", filepath.Join(t.TempDir(), "x.tar")}, 1, "not an ELF executable"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), append([]string{"-epoch", testEpoch}, tt.args...), &stdout, &stderr)
		if code != tt.code || !strings.Contains(stderr.String(), tt.want) {
			t.Errorf("image %q: exit %d, stderr %q; want exit %d and %q", tt.args, code, stderr.String(), tt.code, tt.want)
		}
	}
	// A dynamically linked program, and a binary for another architecture.
	if err := checkStaticELF(tinyELF(elf.EM_X86_64, true), "amd64"); err == nil || !strings.Contains(err.Error(), "CGO_ENABLED=0") {
		t.Errorf("checkStaticELF(with PT_INTERP): %v, want a dynamically linked error", err)
	}
	if err := checkStaticELF(tinyELF(elf.EM_X86_64, false), "amd64"); err != nil {
		t.Errorf("checkStaticELF(tinyELF): %v", err)
	}
	if err := checkStaticELF(tinyELF(elf.EM_X86_64, false), "arm64"); err == nil || !strings.Contains(err.Error(), "ELF machine") {
		t.Errorf("checkStaticELF(amd64 binary for arm64): %v, want a machine error", err)
	}
	for v, want := range map[string]string{"v1.2.3": "v1.2.3", "8cd7622-dirty": "8cd7622-dirty", "-x": "_x", "a/b+c": "a_b_c", "": "dev", strings.Repeat("a", 200): strings.Repeat("a", 128)} {
		if got := tagFromVersion(v); got != want || !validTag.MatchString(got) {
			t.Errorf("tagFromVersion(%q) = %q, want %q", v, got, want)
		}
	}
	for _, name := range []string{"hermes-bridge", "acme/hermes_bridge", "registry.example.com:5000/team/hermes-bridge", "localhost/hb"} {
		if !validName.MatchString(name) {
			t.Errorf("validName rejects %q", name)
		}
	}
	for _, name := range []string{"Hermes", "a//b", "-x", "a/", ""} {
		if validName.MatchString(name) {
			t.Errorf("validName accepts %q", name)
		}
	}
	root, err := moduleRoot()
	if want, _ := filepath.Abs("../.."); err != nil || root != want {
		t.Errorf("moduleRoot() = %q, %v; want %s", root, err, want)
	}
	for name, want := range map[string]string{"hermes-bridge": "docker.io/library/hermes-bridge", "acme/hb": "docker.io/acme/hb", "ghcr.io/acme/hb": "ghcr.io/acme/hb", "localhost/hb": "localhost/hb"} {
		if got := containerdName(name); got != want {
			t.Errorf("containerdName(%q) = %q, want %q", name, got, want)
		}
	}
}

// TestDockerBuild builds deploy/Dockerfile with docker and checks the image's config
// against the Go-built one. It runs only where docker has a daemon and the base images
// are there or can be pulled (not in CI).
func TestDockerBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: docker build")
	}
	if _, err := exec.LookPath("docker"); err != nil {
		t.Skip("docker is not installed")
	}
	if out, err := exec.Command("docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		t.Skipf("docker has no daemon to talk to: %s", strings.TrimSpace(string(out)))
	}
	// The base images must be here or be pullable (a daemon without registry access is
	// no place to test this Dockerfile).
	_, stages, err := readFinalStage("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range stages {
		var base string
		for _, f := range strings.Fields(st.from) {
			if !strings.HasPrefix(f, "--") {
				base = f
				break
			}
		}
		if exec.Command("docker", "image", "inspect", base).Run() == nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		out, err := exec.CommandContext(ctx, "docker", "pull", base).CombinedOutput()
		cancel()
		if err != nil {
			t.Skipf("base image %s is not here and cannot be pulled (%v): %s", base, err, strings.TrimSpace(string(out)))
		}
	}
	tag := "hermes-bridge-imagetest:" + strconv.FormatInt(time.Now().UnixNano(), 36)
	build := exec.Command("docker", "build", "-f", "deploy/Dockerfile", "--build-arg", "VERSION="+testVersion, "-t", tag, ".")
	build.Dir = "../.."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("docker build: %v\n%s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("docker", "rmi", "-f", tag).Run() })
	out, err := exec.Command("docker", "image", "inspect", "--format", "{{json .Config}}", tag).Output()
	if err != nil {
		t.Fatal(err)
	}
	var got v1.Config
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	if got.User != user || !slices.Equal(got.Entrypoint, entrypoint) || !slices.Equal(got.Cmd, cmd) || got.WorkingDir != dataDir ||
		!maps.Equal(got.ExposedPorts, map[string]struct{}{opsPort + "/tcp": {}}) {
		t.Errorf("docker image config %+v", got)
	}
	for _, kv := range imageEnv {
		if !slices.Contains(got.Env, kv) {
			t.Errorf("docker image Env %q lacks %s", got.Env, kv)
		}
	}
	vout, err := exec.Command("docker", "run", "--rm", tag, "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(vout), "hermes-bridge "+testVersion+" ") {
		t.Errorf("docker run %s version: %q (%v)", tag, vout, err)
	}
}
