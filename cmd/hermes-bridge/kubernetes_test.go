package main

// The manifests of deploy/kubernetes checked against the code they deploy: variable names
// against Config, the environment against run's own validation, the endpoints file
// against its loader, file paths against the volumes that provide them, probe paths
// against the operations handler, ports against HERMES_BRIDGE_HTTP_ADDR, and the
// termination grace against the shutdown's bounds. The dashboard and the ServiceMonitor's
// labels are checked against the metrics in bridge/dashboard_internal_test.go.

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hermes-bridge/hermes-bridge/bridge/opshttp"
	"github.com/hermes-bridge/hermes-bridge/kvstore"
)

var k8sDir = filepath.Join("..", "..", "deploy", "kubernetes")

// k8sDoc is one YAML document of deploy/kubernetes.
type k8sDoc struct {
	File       string `json:"-"`
	APIVersion string
	Kind       string
	Metadata   k8sMeta
	raw        []byte // the document as JSON
}

type k8sMeta struct {
	Name      string
	Namespace string
	Labels    map[string]string
}

type k8sSelector struct {
	MatchLabels      map[string]string
	MatchExpressions []any
}

type k8sKeyPath struct{ Key, Path string }

type k8sDeployment struct {
	Spec struct {
		Replicas *int
		Selector k8sSelector
		Template struct {
			Metadata k8sMeta
			Spec     k8sPodSpec
		}
	}
}

type k8sPodSpec struct {
	TerminationGracePeriodSeconds *int64
	AutomountServiceAccountToken  *bool
	EnableServiceLinks            *bool
	SecurityContext               struct {
		RunAsNonRoot   *bool
		RunAsUser      *int64
		RunAsGroup     *int64
		FSGroup        *int64
		SeccompProfile struct{ Type string }
	}
	TopologySpreadConstraints []struct {
		TopologyKey   string
		LabelSelector k8sSelector
	}
	InitContainers []k8sContainer
	Containers     []k8sContainer
	Volumes        []k8sVolume
}

type k8sVolume struct {
	Name   string
	Secret *struct {
		SecretName  string
		DefaultMode *int
		Items       []k8sKeyPath
	}
	ConfigMap *struct {
		Name        string
		DefaultMode *int
		Items       []k8sKeyPath
	}
}

type k8sContainer struct {
	Name    string
	Image   string
	Command []string
	Args    []string
	Ports   []struct {
		Name          string
		ContainerPort int
		Protocol      string
	}
	Env []struct {
		Name      string
		Value     *string
		ValueFrom *struct {
			FieldRef        *struct{ FieldPath string }
			SecretKeyRef    *struct{ Name, Key string }
			ConfigMapKeyRef *struct{ Name, Key string }
		}
	}
	Resources struct {
		Requests map[string]any
		Limits   map[string]any
	}
	LivenessProbe   *k8sProbe
	ReadinessProbe  *k8sProbe
	StartupProbe    *k8sProbe
	Lifecycle       map[string]map[string]any
	SecurityContext struct {
		RunAsNonRoot             *bool
		RunAsUser                *int64
		ReadOnlyRootFilesystem   *bool
		AllowPrivilegeEscalation *bool
		Capabilities             struct{ Drop, Add []string }
	}
	VolumeMounts []struct {
		Name      string
		MountPath string
		ReadOnly  bool
		SubPath   string
	}
}

type k8sProbe struct {
	HTTPGet *struct {
		Path   string
		Port   any // a name or a number
		Scheme string
	}
	Exec           any
	TCPSocket      any
	GRPC           any
	TimeoutSeconds int
	PeriodSeconds  int
}

type k8sService struct {
	Spec struct {
		Type     string
		Selector map[string]string
		Ports    []k8sServicePort
	}
}

type k8sServicePort struct {
	Name       string
	Port       int
	TargetPort any // a name or a number
	Protocol   string
}

type k8sServiceMonitor struct {
	Spec struct {
		Selector  k8sSelector
		Endpoints []struct {
			Port, Path, Interval, ScrapeTimeout string
			HonorLabels                         bool
		}
	}
}

type k8sPDB struct {
	Spec struct {
		MaxUnavailable any
		MinAvailable   any
		Selector       k8sSelector
	}
}

type k8sKustomization struct {
	Namespace string
	Resources []string
	Images    []struct{ Name, NewName, NewTag string }
}

// k8sManifests reads every YAML document of every deploy/kubernetes/*.yaml file.
func k8sManifests(t *testing.T) []k8sDoc {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(k8sDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s: %v", k8sDir, err)
	}
	if more, _ := filepath.Glob(filepath.Join(k8sDir, "*.yml")); len(more) > 0 {
		t.Errorf("%v: name manifests *.yaml (the test reads those)", more)
	}
	var docs []k8sDoc
	for _, f := range files {
		data, err := os.ReadFile(f)
		noErr(t, err)
		docs = append(docs, k8sDecode(t, filepath.Base(f), data)...)
	}
	return docs
}

// k8sDecode decodes every YAML document of data (the file name), skipping empty ones.
func k8sDecode(t *testing.T, name string, data []byte) []k8sDoc {
	t.Helper()
	var docs []k8sDoc
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for i := 0; ; i++ {
		var v any
		err := dec.Decode(&v)
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("%s: document %d: %v", name, i, err)
		}
		if v == nil {
			continue
		}
		raw, err := json.Marshal(v)
		d := k8sDoc{File: name, raw: raw}
		if err == nil {
			err = json.Unmarshal(raw, &d)
		}
		if err != nil {
			t.Fatalf("%s: document %d: %v", name, i, err)
		}
		docs = append(docs, d)
	}
}

// k8sOne returns the one document of kind, decoded into v.
func k8sOne(t *testing.T, docs []k8sDoc, kind string, v any) k8sDoc {
	t.Helper()
	var found []k8sDoc
	for _, d := range docs {
		if d.Kind == kind {
			found = append(found, d)
		}
	}
	if len(found) != 1 {
		t.Fatalf("deploy/kubernetes has %d documents of kind %s, want 1", len(found), kind)
	}
	if v != nil {
		if err := json.Unmarshal(found[0].raw, v); err != nil {
			t.Fatalf("%s %s: %v", kind, found[0].Metadata.Name, err)
		}
	}
	return found[0]
}

// k8sBridge returns the Deployment and its hermes-bridge container.
func k8sBridge(t *testing.T, docs []k8sDoc) (*k8sDeployment, *k8sContainer) {
	t.Helper()
	var dep k8sDeployment
	k8sOne(t, docs, "Deployment", &dep)
	cs := dep.Spec.Template.Spec.Containers
	if len(cs) != 1 {
		t.Fatalf("the Deployment has %d containers, want 1 (hermes-bridge)", len(cs))
	}
	return &dep, &cs[0]
}

// k8sEnv returns the container's variables with the values they take in a pod: literal
// values, the pod name for fieldRef metadata.name, and the keys of Secrets and
// ConfigMaps of deploy/kubernetes.
func k8sEnv(t *testing.T, docs []k8sDoc, c *k8sContainer) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, e := range c.Env {
		if _, dup := env[e.Name]; dup {
			t.Errorf("Deployment: %s is set twice", e.Name)
		}
		switch {
		case e.Value != nil:
			env[e.Name] = *e.Value
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil:
			switch e.ValueFrom.FieldRef.FieldPath {
			case "metadata.name":
				env[e.Name] = "hermes-bridge-6c9f7d8b4-x7k2p"
			case "metadata.namespace":
				env[e.Name] = "hermes"
			default:
				t.Errorf("Deployment: %s: fieldRef %s is not handled by this test", e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
		case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
			r := e.ValueFrom.SecretKeyRef
			v, ok := k8sData(docs, "Secret", r.Name)[r.Key]
			if !ok {
				t.Errorf("Deployment: %s: Secret %s has no key %s", e.Name, r.Name, r.Key)
			}
			env[e.Name] = v
		case e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil:
			r := e.ValueFrom.ConfigMapKeyRef
			v, ok := k8sData(docs, "ConfigMap", r.Name)[r.Key]
			if !ok {
				t.Errorf("Deployment: %s: ConfigMap %s has no key %s", e.Name, r.Name, r.Key)
			}
			env[e.Name] = v
		default:
			t.Errorf("Deployment: %s has neither a value nor a valueFrom this test handles", e.Name)
		}
	}
	return env
}

// k8sData returns the keys and values of the Secret or ConfigMap name (nil if absent):
// data (base64 for a Secret) and stringData.
func k8sData(docs []k8sDoc, kind, name string) map[string]string {
	for _, d := range docs {
		if d.Kind != kind || d.Metadata.Name != name {
			continue
		}
		var v struct {
			Data       map[string]string
			StringData map[string]string
		}
		if err := json.Unmarshal(d.raw, &v); err != nil {
			return nil
		}
		out := map[string]string{}
		for k, s := range v.Data {
			if kind == "Secret" {
				s = k8sBase64(s)
			}
			out[k] = s
		}
		for k, s := range v.StringData {
			out[k] = s
		}
		return out
	}
	return nil
}

// k8sBase64 decodes a Secret's data value (kept as it is when it is not base64, which
// the API server would refuse).
func k8sBase64(s string) string {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return s
	}
	return string(b)
}

// k8sFile is where a path inside the container comes from.
type k8sFile struct {
	Kind, Name, Key string // the Secret or ConfigMap and its key
	ReadOnly        bool
	Content         string
	ok              bool
}

// k8sVolumeSource returns the Secret or ConfigMap a volume projects, with its items; ok is
// false for a volume of another kind.
func k8sVolumeSource(v k8sVolume) (kind, name string, items []k8sKeyPath, ok bool) {
	switch {
	case v.Secret != nil:
		return "Secret", v.Secret.SecretName, v.Secret.Items, true
	case v.ConfigMap != nil:
		return "ConfigMap", v.ConfigMap.Name, v.ConfigMap.Items, true
	}
	return "", "", nil, false
}

// k8sResolve finds which volume provides file p of container c: the mount it lies
// under, the Secret or ConfigMap of that volume and the key projected at p.
func k8sResolve(docs []k8sDoc, pod *k8sPodSpec, c *k8sContainer, p string) (k8sFile, error) {
	p = path.Clean(p)
	for _, m := range c.VolumeMounts {
		rel, ok := strings.CutPrefix(p, path.Clean(m.MountPath)+"/")
		if !ok {
			continue
		}
		if m.SubPath != "" {
			return k8sFile{}, fmt.Errorf("%s is under mount %s, which uses subPath (a subPath mount never sees an updated Secret or ConfigMap)", p, m.MountPath)
		}
		for _, v := range pod.Volumes {
			if v.Name != m.Name {
				continue
			}
			f := k8sFile{ReadOnly: m.ReadOnly}
			var items []k8sKeyPath
			var ok bool
			if f.Kind, f.Name, items, ok = k8sVolumeSource(v); !ok {
				return k8sFile{}, fmt.Errorf("%s is under mount %s of volume %s, which is neither a Secret nor a ConfigMap", p, m.MountPath, v.Name)
			}
			data := k8sData(docs, f.Kind, f.Name)
			if data == nil {
				return k8sFile{}, fmt.Errorf("%s: volume %s names %s %s, which deploy/kubernetes does not define", p, v.Name, f.Kind, f.Name)
			}
			if items == nil {
				f.Key = rel
			} else {
				for _, it := range items {
					if path.Clean(it.Path) == rel {
						f.Key = it.Key
					}
				}
				if f.Key == "" {
					return k8sFile{}, fmt.Errorf("%s: volume %s (%s %s) projects no item at path %s", p, v.Name, f.Kind, f.Name, rel)
				}
			}
			content, ok := data[f.Key]
			if !ok {
				return k8sFile{}, fmt.Errorf("%s: %s %s has no key %s", p, f.Kind, f.Name, f.Key)
			}
			f.Content, f.ok = content, true
			return f, nil
		}
		return k8sFile{}, fmt.Errorf("%s: mount %s names volume %s, which the pod does not have", p, m.MountPath, m.Name)
	}
	return k8sFile{}, fmt.Errorf("%s is under no volumeMount of container %s", p, c.Name)
}

// k8sFileVariables are the variables of Config that name a file the bridge reads.
func k8sFileVariables() []string {
	out := []string{"NATS_CREDS", "NATS_NKEY", "NATS_TLS_CA", "NATS_TLS_CERT", "NATS_TLS_KEY"}
	for _, f := range configFields() {
		if strings.HasSuffix(f.Key, "_FILE") {
			out = append(out, f.Key)
		}
	}
	return out
}

// k8sRuntimeVariables are standard variables of the Go runtime, allowed besides Config's.
var k8sRuntimeVariables = []string{"GOMEMLIMIT", "GOMAXPROCS", "GOGC", "GODEBUG"}

// Every document is a named object, none hard-codes a namespace (kustomization sets it),
// and the kustomization lists exactly the files of the directory.
func TestKubernetesManifests(t *testing.T) {
	docs := k8sManifests(t)
	var k k8sKustomization
	kd := k8sOne(t, docs, "Kustomization", &k)
	seen := map[string]string{}
	for _, d := range docs {
		where := fmt.Sprintf("%s: %s %q", d.File, d.Kind, d.Metadata.Name)
		if d.APIVersion == "" || d.Kind == "" {
			t.Errorf("%s: a document lacks apiVersion or kind", d.File)
			continue
		}
		if d.Kind == "Kustomization" {
			continue
		}
		if d.Metadata.Name == "" {
			t.Errorf("%s: no metadata.name", where)
		}
		// kustomize sets every namespace; a Secret written by `kubectl -n hermes create
		// secret --dry-run=client -o yaml` names it too (and has no labels).
		if d.Metadata.Namespace != "" && d.Metadata.Namespace != k.Namespace {
			t.Errorf("%s: sets namespace %s; leave it to kustomization.yaml's namespace (%s)", where, d.Metadata.Namespace, k.Namespace)
		}
		if d.Kind != "Secret" && d.Metadata.Labels["app.kubernetes.io/name"] != "hermes-bridge" {
			t.Errorf("%s: no label app.kubernetes.io/name: hermes-bridge", where)
		}
		key := d.Kind + "/" + d.Metadata.Name
		if f, dup := seen[key]; dup {
			t.Errorf("%s: %s is also defined in %s", where, key, f)
		}
		seen[key] = d.File
	}
	for _, kind := range []string{"Deployment", "ConfigMap", "Secret", "PodDisruptionBudget", "Service", "ServiceMonitor"} {
		k8sOne(t, docs, kind, nil)
	}

	if kd.File != "kustomization.yaml" {
		t.Errorf("the Kustomization is in %s, want kustomization.yaml", kd.File)
	}
	if k.Namespace == "" {
		t.Error("kustomization.yaml sets no namespace")
	}
	var files []string
	for _, d := range docs {
		if d.File != "kustomization.yaml" && !slices.Contains(files, d.File) {
			files = append(files, d.File)
		}
	}
	resources := slices.Clone(k.Resources)
	sort.Strings(files)
	sort.Strings(resources)
	if !slices.Equal(files, resources) {
		t.Errorf("kustomization.yaml lists resources %v; the directory has %v", resources, files)
	}
	_, c := k8sBridge(t, docs)
	image, _, _ := strings.Cut(c.Image, ":")
	if !slices.ContainsFunc(k.Images, func(i struct{ Name, NewName, NewTag string }) bool { return i.Name == image }) {
		t.Errorf("kustomization.yaml's images do not name the container's image %q, so they would not set it", image)
	}
}

// Every variable the Deployment sets is a setting of Config (or a standard OTEL_* or Go
// runtime variable), and none holds a secret inline.
func TestKubernetesVariablesAreSettings(t *testing.T) {
	docs := k8sManifests(t)
	dep, c := k8sBridge(t, docs)
	fields := map[string]field{}
	for _, f := range configFields() {
		fields[f.Key] = f
	}
	for _, e := range c.Env {
		f, ok := fields[e.Name]
		switch {
		case ok && f.Secret && e.Value != nil:
			t.Errorf("Deployment: %s holds a secret inline; use its _FILE variable with a mounted Secret", e.Name)
		case ok, strings.HasPrefix(e.Name, "OTEL_"), slices.Contains(k8sRuntimeVariables, e.Name):
		default:
			hint := ""
			if s := closestSetting(e.Name); s != "" {
				hint = " (did you mean " + s + "?)"
			}
			t.Errorf("Deployment: %s is not a variable of Config in cmd/hermes-bridge/config.go%s", e.Name, hint)
		}
	}
	env := k8sEnv(t, docs, c)
	for _, name := range []string{"NATS_URL", "HERMES_ENDPOINTS_FILE", "HERMES_BRIDGE_REPLICA_ID", "HERMES_BRIDGE_HTTP_ADDR",
		"HERMES_BRIDGE_REPLICAS", "HERMES_BRIDGE_SHUTDOWN_GRACE"} {
		if _, ok := env[name]; !ok {
			t.Errorf("Deployment: %s is not set", name)
		}
	}
	for _, e := range c.Env {
		if e.Name == "HERMES_BRIDGE_REPLICA_ID" && (e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "metadata.name") {
			t.Error("Deployment: HERMES_BRIDGE_REPLICA_ID should come from fieldRef metadata.name (one id per pod)")
		}
	}
	// Each Service of the namespace would add <NAME>_SERVICE_HOST, <NAME>_PORT, ... to the
	// environment: the Service hermes-bridge gives HERMES_BRIDGE_* variables that no
	// setting reads (run warns about each), a Service named nats or hermes NATS_* or HERMES_*.
	if p := dep.Spec.Template.Spec.EnableServiceLinks; p == nil || *p {
		t.Error("Deployment: set enableServiceLinks: false; the Service hermes-bridge would inject HERMES_BRIDGE_SERVICE_HOST, HERMES_BRIDGE_PORT, ...")
	}
}

// k8sRunEnv is the Deployment's environment with the files of its volumes written under
// root: every path under a mount becomes root+path, in the variables and in the
// endpoints file.
func k8sRunEnv(t *testing.T, docs []k8sDoc) (env map[string]string, root string) {
	t.Helper()
	dep, c := k8sBridge(t, docs)
	pod := &dep.Spec.Template.Spec
	env = k8sEnv(t, docs, c)
	root = t.TempDir()
	rewrite := func(s string) string {
		for _, m := range c.VolumeMounts {
			mp := path.Clean(m.MountPath) + "/"
			s = strings.ReplaceAll(s, mp, filepath.Join(root, mp)+"/")
		}
		return s
	}
	for _, m := range c.VolumeMounts {
		for _, v := range pod.Volumes {
			if v.Name != m.Name {
				continue
			}
			kind, name, items, ok := k8sVolumeSource(v)
			if !ok {
				continue
			}
			data := k8sData(docs, kind, name)
			if items == nil {
				for k := range data {
					items = append(items, k8sKeyPath{Key: k, Path: k})
				}
			}
			for _, it := range items {
				p := filepath.Join(root, m.MountPath, it.Path)
				noErr(t, os.MkdirAll(filepath.Dir(p), 0o700))
				noErr(t, os.WriteFile(p, []byte(rewrite(data[it.Key])), 0o600))
			}
		}
	}
	for k, v := range env {
		env[k] = rewrite(v)
	}
	return env, root
}

// The Deployment's environment, with the files of its Secret and ConfigMap, passes run's
// own parsing and validation (the endpoints file through its loader, the key files read),
// and sets no variable run does not know.
func TestKubernetesConfigPassesRun(t *testing.T) {
	docs := k8sManifests(t)
	dep, c := k8sBridge(t, docs)
	env, _ := k8sRunEnv(t, docs)
	p, err := prepareRun(env)
	if err != nil {
		t.Fatalf("run would refuse the Deployment's configuration: %v", err)
	}
	if len(p.unknown) > 0 {
		t.Errorf("run would warn about variables no setting reads: %v", p.unknown)
	}
	if p.defaulted || p.cfg.EndpointsFile == "" {
		t.Error("the Deployment configures no endpoints file: run would use the local default Hermes")
	}
	if p.cfg.NATSURL == "" {
		t.Error("NATS_URL is not set: run would start an embedded server, which needs a writable data directory (the root filesystem is read-only)")
	}

	// Replicas: several bridge replicas; stream replicas within the NATS cluster of
	// deploy/helm/nats-values.yaml, whose server names NATS_URL lists.
	if r := dep.Spec.Replicas; r == nil || *r < 2 {
		t.Errorf("Deployment replicas %v: want at least 2", r)
	}
	raw, err := os.ReadFile(filepath.Join("..", "..", "deploy", "helm", "nats-values.yaml"))
	noErr(t, err)
	var values struct {
		Config struct{ Cluster struct{ Replicas int } }
	}
	noErr(t, yaml.Unmarshal(raw, &values))
	servers := values.Config.Cluster.Replicas
	if p.cfg.Replicas < 3 || p.cfg.Replicas > servers {
		t.Errorf("HERMES_BRIDGE_REPLICAS=%d: want 3 to the %d servers of deploy/helm/nats-values.yaml (R3 survives the loss of one)", p.cfg.Replicas, servers)
	}
	urls := strings.Split(k8sEnv(t, docs, c)["NATS_URL"], ",")
	if len(urls) != servers {
		t.Errorf("NATS_URL lists %d servers; deploy/helm/nats-values.yaml runs %d", len(urls), servers)
	}
	for _, u := range urls {
		pu, err := url.Parse(u)
		if err != nil || !strings.Contains(string(raw), pu.Host) {
			t.Errorf("NATS_URL server %s is not one deploy/helm/nats-values.yaml names", u)
		}
	}
}

// Every file a variable or the endpoints file names is provided by a read-only Secret or
// ConfigMap volume, with the key it projects at that path; every key of the Secret is
// used; the non-root user can read the files.
func TestKubernetesFilesAreMounted(t *testing.T) {
	docs := k8sManifests(t)
	dep, c := k8sBridge(t, docs)
	pod := &dep.Spec.Template.Spec
	env := k8sEnv(t, docs, c)
	used := map[string]bool{} // kind/name/key
	check := func(what, p string) k8sFile {
		f, err := k8sResolve(docs, pod, c, p)
		if err != nil {
			t.Errorf("%s: %v", what, err)
			return f
		}
		if !f.ReadOnly {
			t.Errorf("%s=%s: its mount is not readOnly", what, p)
		}
		used[f.Kind+"/"+f.Name+"/"+f.Key] = true
		return f
	}
	for _, name := range k8sFileVariables() {
		if p, ok := env[name]; ok && p != "" {
			check(name, p)
		}
	}

	// The endpoints file, read by the real loader (its extension chooses the format).
	epPath, ok := env["HERMES_ENDPOINTS_FILE"]
	if !ok {
		t.Fatal("HERMES_ENDPOINTS_FILE is not set")
	}
	ep := check("HERMES_ENDPOINTS_FILE", epPath)
	if !ep.ok {
		t.FailNow()
	}
	if ep.Kind != "ConfigMap" {
		t.Errorf("HERMES_ENDPOINTS_FILE comes from a %s; want the ConfigMap (it holds no secret)", ep.Kind)
	}
	tmp := filepath.Join(t.TempDir(), path.Base(epPath))
	noErr(t, os.WriteFile(tmp, []byte(ep.Content), 0o600))
	specs, err := ReadEndpointsFile(tmp)
	if err != nil {
		t.Fatalf("ConfigMap %s: %v", ep.Name, err)
	}
	for _, s := range specs {
		if s.APIKeyEnv != "" {
			t.Errorf("endpoint %q: api_key_env: mount its key as a file (api_key_file) instead, re-read on SIGHUP", s.ID)
		}
		if s.APIKeyFile == "" {
			continue
		}
		if f := check(fmt.Sprintf("endpoint %q api_key_file", s.ID), s.APIKeyFile); f.ok && f.Kind != "Secret" {
			t.Errorf("endpoint %q: api_key_file %s comes from a %s, not a Secret", s.ID, s.APIKeyFile, f.Kind)
		}
	}

	for _, v := range pod.Volumes {
		if v.Secret == nil {
			continue
		}
		for k := range k8sData(docs, "Secret", v.Secret.SecretName) {
			if !used["Secret/"+v.Secret.SecretName+"/"+k] {
				t.Errorf("Secret %s: key %s is used by no variable and no endpoint", v.Secret.SecretName, k)
			}
		}
		mode := 0o644 // the Kubernetes default
		if v.Secret.DefaultMode != nil {
			mode = *v.Secret.DefaultMode
		}
		if mode&0o077 != 0 {
			t.Errorf("volume %s: defaultMode %#o lets others read the Secret; want 0400", v.Name, mode)
		}
		if fs := pod.SecurityContext.FSGroup; mode&0o004 == 0 && (fs == nil || *fs == 0) {
			t.Errorf("volume %s: mode %#o is root's only; set the pod's fsGroup (65532) so the non-root user can read it", v.Name, mode)
		}
	}
	// Mounts do not nest: kubelet rewrites a Secret or ConfigMap volume as a whole, which a
	// mount point inside it does not survive.
	for _, a := range c.VolumeMounts {
		for _, b := range c.VolumeMounts {
			if a.Name != b.Name && strings.HasPrefix(path.Clean(b.MountPath)+"/", path.Clean(a.MountPath)+"/") {
				t.Errorf("mount %s lies inside mount %s", b.MountPath, a.MountPath)
			}
		}
	}
}

// k8sPortMatches reports whether a probe's or Service's port (a name or a number) is the
// container port.
func k8sPortMatches(port any, name string, number int) bool {
	switch p := port.(type) {
	case string:
		if n, err := strconv.Atoi(p); err == nil {
			return n == number
		}
		return p == name
	case float64:
		return int(p) == number
	}
	return false
}

// The container port is HERMES_BRIDGE_HTTP_ADDR's; the probes reach the operations
// handler's real paths on it: liveness one that stays 200 when the bridge is not ready,
// readiness one that follows readiness, within the probe's timeout.
func TestKubernetesProbesAndPorts(t *testing.T) {
	docs := k8sManifests(t)
	_, c := k8sBridge(t, docs)
	env := k8sEnv(t, docs, c)
	host, portStr, err := net.SplitHostPort(env["HERMES_BRIDGE_HTTP_ADDR"])
	if err != nil {
		t.Fatalf("HERMES_BRIDGE_HTTP_ADDR=%q: %v", env["HERMES_BRIDGE_HTTP_ADDR"], err)
	}
	if host != "" && host != "0.0.0.0" && host != "::" {
		t.Errorf("HERMES_BRIDGE_HTTP_ADDR=%s listens on %s only: kubelet and Prometheus could not reach it (use :%s)", env["HERMES_BRIDGE_HTTP_ADDR"], host, portStr)
	}
	port, _ := strconv.Atoi(portStr)
	if len(c.Ports) != 1 {
		t.Fatalf("the container declares %d ports, want 1 (the operations listener)", len(c.Ports))
	}
	cp := c.Ports[0]
	if cp.ContainerPort != port || cp.Name == "" {
		t.Errorf("container port %s %d: want a named port %d (HERMES_BRIDGE_HTTP_ADDR)", cp.Name, cp.ContainerPort, port)
	}
	if len(c.Command) > 0 || !slices.Equal(c.Args, []string{"run"}) && len(c.Args) > 0 {
		t.Errorf("command %v args %v: the image's entrypoint is /hermes-bridge; args should be [run] or nothing", c.Command, c.Args)
	}

	// The real handler, with a readiness check that holds a state and records its deadline.
	notReady := errors.New("starting")
	var readyErr error
	var readyBudget time.Duration
	h := opshttp.Handler(prometheus.NewRegistry(), func(ctx context.Context) error {
		if dl, ok := ctx.Deadline(); ok {
			readyBudget = time.Until(dl)
		}
		return readyErr
	})
	get := func(p string, ready error) int {
		readyErr = ready
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, p, nil))
		return rec.Code
	}
	probe := func(name string, pr *k8sProbe) string {
		if pr == nil {
			t.Errorf("the container has no %s", name)
			return ""
		}
		if pr.Exec != nil {
			t.Errorf("%s: exec needs a shell or a binary the image does not have; use httpGet", name)
		}
		if pr.HTTPGet == nil {
			t.Errorf("%s: want httpGet", name)
			return ""
		}
		if s := pr.HTTPGet.Scheme; s != "" && s != "HTTP" {
			t.Errorf("%s: scheme %s; the operations listener serves plain HTTP", name, s)
		}
		if !k8sPortMatches(pr.HTTPGet.Port, cp.Name, cp.ContainerPort) {
			t.Errorf("%s: port %v is not the container port %s (%d)", name, pr.HTTPGet.Port, cp.Name, cp.ContainerPort)
		}
		if code := get(pr.HTTPGet.Path, nil); code != http.StatusOK {
			t.Errorf("%s: GET %s answers %d on a ready bridge (opshttp.Handler serves /healthz, /readyz, /metrics)", name, pr.HTTPGet.Path, code)
		}
		return pr.HTTPGet.Path
	}
	if p := probe("livenessProbe", c.LivenessProbe); p != "" {
		if code := get(p, notReady); code != http.StatusOK {
			t.Errorf("livenessProbe: GET %s answers %d while the bridge is not ready: a NATS outage or a shutdown would restart every pod", p, code)
		}
	}
	if p := probe("readinessProbe", c.ReadinessProbe); p != "" {
		if code := get(p, notReady); code != http.StatusServiceUnavailable {
			t.Errorf("readinessProbe: GET %s answers %d while the bridge is not ready, want 503", p, code)
		}
		readyBudget = 0
		get(p, nil)
		// The check's bound, rounded up to whole seconds as the probe's timeout is.
		bound := (readyBudget + time.Second - 1).Truncate(time.Second)
		if budget := time.Duration(c.ReadinessProbe.TimeoutSeconds) * time.Second; readyBudget <= 0 || budget <= bound {
			t.Errorf("readinessProbe: timeoutSeconds %d must exceed the readiness check's own bound (%s)", c.ReadinessProbe.TimeoutSeconds, bound)
		}
	}
	if c.StartupProbe != nil {
		probe("startupProbe", c.StartupProbe)
	}
	for hook, handler := range c.Lifecycle {
		if _, ok := handler["exec"]; ok {
			t.Errorf("lifecycle %s: exec needs a shell or a binary the image does not have", hook)
		}
	}
}

// k8sShutdownMargin is what follows the shutdown grace, at most (see runService and
// bridge.(*Bridge).Run): the hand-back of prefetched deliveries before the grace starts
// (handBackFor, 2 s, in bridge.(*Bridge).handBack), one KV request of each action cut off
// at its end (kvstore.OpTimeout), the NATS drain and the operations listener's stop.
const k8sShutdownMargin = 2*time.Second + kvstore.OpTimeout + drainTimeout + opsStopTimeout

// Kubernetes waits terminationGracePeriodSeconds after SIGTERM before it kills the pod:
// that covers the grace and everything after it, and deployment.yaml says so.
func TestKubernetesShutdownAlignment(t *testing.T) {
	docs := k8sManifests(t)
	dep, c := k8sBridge(t, docs)
	env := k8sEnv(t, docs, c)
	graceStr, ok := env["HERMES_BRIDGE_SHUTDOWN_GRACE"]
	if !ok {
		for _, f := range configFields() {
			if f.Key == "HERMES_BRIDGE_SHUTDOWN_GRACE" {
				graceStr = f.Default
			}
		}
	}
	grace, err := time.ParseDuration(graceStr)
	if err != nil {
		t.Fatalf("HERMES_BRIDGE_SHUTDOWN_GRACE=%q: %v", graceStr, err)
	}
	tgp := dep.Spec.Template.Spec.TerminationGracePeriodSeconds
	if tgp == nil {
		t.Fatal("terminationGracePeriodSeconds is not set (the default, 30 s, does not cover the shutdown)")
	}
	if need := grace + k8sShutdownMargin; time.Duration(*tgp)*time.Second <= need {
		t.Errorf("terminationGracePeriodSeconds %d: want more than %s (HERMES_BRIDGE_SHUTDOWN_GRACE %s + %s after it)", *tgp, need, grace, k8sShutdownMargin)
	}
	src, err := os.ReadFile(filepath.Join(k8sDir, "deployment.yaml"))
	noErr(t, err)
	if doc := fmt.Sprintf("the grace + %d s", int(k8sShutdownMargin.Seconds())); !bytes.Contains(src, []byte(doc)) {
		t.Errorf("deployment.yaml's shutdown comment does not say %q: update it to the bounds in run.go", doc)
	}
}

// k8sLabelsMatch reports whether selector selects an object with labels.
func k8sLabelsMatch(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// The Service, ServiceMonitor, PodDisruptionBudget and spread constraints select the
// bridge's pods and its operations port.
func TestKubernetesSelectorsAndService(t *testing.T) {
	docs := k8sManifests(t)
	dep, c := k8sBridge(t, docs)
	podLabels := dep.Spec.Template.Metadata.Labels
	if !k8sLabelsMatch(dep.Spec.Selector.MatchLabels, podLabels) {
		t.Errorf("Deployment selector %v does not match its pod labels %v", dep.Spec.Selector.MatchLabels, podLabels)
	}
	for _, tsc := range dep.Spec.Template.Spec.TopologySpreadConstraints {
		if !k8sLabelsMatch(tsc.LabelSelector.MatchLabels, podLabels) {
			t.Errorf("topologySpreadConstraint %s: selector %v does not match the pod labels", tsc.TopologyKey, tsc.LabelSelector.MatchLabels)
		}
	}
	cp := c.Ports[0]

	var svc k8sService
	sd := k8sOne(t, docs, "Service", &svc)
	if !k8sLabelsMatch(svc.Spec.Selector, podLabels) {
		t.Errorf("Service selector %v does not match the pod labels %v", svc.Spec.Selector, podLabels)
	}
	if svc.Spec.Type != "" && svc.Spec.Type != "ClusterIP" {
		t.Errorf("Service type %s: want ClusterIP (only Prometheus reaches it)", svc.Spec.Type)
	}
	var metricsPort string
	for _, p := range svc.Spec.Ports {
		if !k8sPortMatches(p.TargetPort, cp.Name, cp.ContainerPort) {
			t.Errorf("Service port %s: targetPort %v is not the container port %s (%d)", p.Name, p.TargetPort, cp.Name, cp.ContainerPort)
		}
		if p.Name == "metrics" {
			metricsPort = p.Name
		}
	}
	if metricsPort == "" {
		t.Error("the Service has no port named metrics")
	}

	var sm k8sServiceMonitor
	k8sOne(t, docs, "ServiceMonitor", &sm)
	if !k8sLabelsMatch(sm.Spec.Selector.MatchLabels, sd.Metadata.Labels) {
		t.Errorf("ServiceMonitor selector %v does not match the Service labels %v", sm.Spec.Selector.MatchLabels, sd.Metadata.Labels)
	}
	if len(sm.Spec.Endpoints) == 0 {
		t.Error("the ServiceMonitor has no endpoints")
	}
	h := opshttp.Handler(opshttp.NewRegistry(), func(context.Context) error { return nil })
	for _, e := range sm.Spec.Endpoints {
		if !slices.ContainsFunc(svc.Spec.Ports, func(p k8sServicePort) bool { return p.Name == e.Port }) {
			t.Errorf("ServiceMonitor endpoint port %q is not a port name of the Service", e.Port)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, e.Path, nil))
		if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "go_goroutines") {
			t.Errorf("ServiceMonitor path %q: the operations handler answers %d, not the metrics", e.Path, rec.Code)
		}
		iv, err1 := time.ParseDuration(e.Interval)
		st, err2 := time.ParseDuration(e.ScrapeTimeout)
		if err1 != nil || err2 != nil || st >= iv {
			t.Errorf("ServiceMonitor interval %q, scrapeTimeout %q: want durations, the timeout shorter", e.Interval, e.ScrapeTimeout)
		}
	}

	var pdb k8sPDB
	k8sOne(t, docs, "PodDisruptionBudget", &pdb)
	if !k8sLabelsMatch(pdb.Spec.Selector.MatchLabels, podLabels) {
		t.Errorf("PodDisruptionBudget selector %v does not match the pod labels %v", pdb.Spec.Selector.MatchLabels, podLabels)
	}
	replicas := 1
	if dep.Spec.Replicas != nil {
		replicas = *dep.Spec.Replicas
	}
	switch {
	case pdb.Spec.MaxUnavailable != nil && pdb.Spec.MinAvailable != nil:
		t.Error("PodDisruptionBudget sets both maxUnavailable and minAvailable")
	case pdb.Spec.MaxUnavailable != nil:
		if n, ok := pdb.Spec.MaxUnavailable.(float64); !ok || n != 1 {
			t.Errorf("PodDisruptionBudget maxUnavailable %v: want 1", pdb.Spec.MaxUnavailable)
		}
	case pdb.Spec.MinAvailable != nil:
		if n, ok := pdb.Spec.MinAvailable.(float64); !ok || int(n) >= replicas {
			t.Errorf("PodDisruptionBudget minAvailable %v with %d replicas would block every eviction", pdb.Spec.MinAvailable, replicas)
		}
	default:
		t.Error("PodDisruptionBudget sets neither maxUnavailable nor minAvailable")
	}
}

// k8sBytes parses a Kubernetes memory quantity (512Mi, 1G, 1048576) or a GOMEMLIMIT
// value (400MiB, 1GiB, 1048576B).
func k8sBytes(s string) (int64, bool) {
	s = strings.TrimSuffix(strings.TrimSpace(s), "B")
	units := []struct {
		suffix string
		mult   int64
	}{{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40}, {"K", 1e3}, {"k", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}}
	for _, u := range units {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			v, err := strconv.ParseInt(n, 10, 64)
			return v * u.mult, err == nil
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	return v, err == nil
}

// k8sMillicores parses a CPU quantity (250m, 2, 0.5).
func k8sMillicores(v any) (int64, bool) {
	s := fmt.Sprint(v)
	if n, ok := strings.CutSuffix(s, "m"); ok {
		m, err := strconv.ParseInt(n, 10, 64)
		return m, err == nil
	}
	f, err := strconv.ParseFloat(s, 64)
	return int64(f * 1000), err == nil
}

// The pod runs as the image's non-root user on a read-only root filesystem, without
// privileges or an API token, with requests and limits (and GOMEMLIMIT below the limit).
func TestKubernetesSecurityAndResources(t *testing.T) {
	docs := k8sManifests(t)
	dep, c := k8sBridge(t, docs)
	pod := &dep.Spec.Template.Spec
	psc, csc := pod.SecurityContext, c.SecurityContext
	isTrue := func(b *bool) bool { return b != nil && *b }
	if !isTrue(psc.RunAsNonRoot) || !isTrue(csc.RunAsNonRoot) && csc.RunAsNonRoot != nil {
		t.Error("runAsNonRoot is not true")
	}
	for _, u := range []*int64{psc.RunAsUser, csc.RunAsUser} {
		if u != nil && *u != 65532 {
			t.Errorf("runAsUser %d: the image's user is 65532", *u)
		}
	}
	if psc.RunAsUser == nil && csc.RunAsUser == nil {
		t.Error("runAsUser is not set (65532, the image's user)")
	}
	if psc.SeccompProfile.Type != "RuntimeDefault" {
		t.Errorf("seccompProfile %q: want RuntimeDefault", psc.SeccompProfile.Type)
	}
	if !isTrue(csc.ReadOnlyRootFilesystem) {
		t.Error("readOnlyRootFilesystem is not true")
	}
	if csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation {
		t.Error("allowPrivilegeEscalation is not false")
	}
	if !slices.Contains(csc.Capabilities.Drop, "ALL") || len(csc.Capabilities.Add) > 0 {
		t.Errorf("capabilities drop %v add %v: want drop [ALL] and nothing added", csc.Capabilities.Drop, csc.Capabilities.Add)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("automountServiceAccountToken is not false: the bridge does not use the Kubernetes API")
	}

	r := c.Resources
	for _, k := range []string{"cpu", "memory"} {
		if r.Requests[k] == nil || r.Limits[k] == nil {
			t.Errorf("resources: %s request or limit missing", k)
		}
	}
	reqMem, ok1 := k8sBytes(fmt.Sprint(r.Requests["memory"]))
	limMem, ok2 := k8sBytes(fmt.Sprint(r.Limits["memory"]))
	reqCPU, ok3 := k8sMillicores(r.Requests["cpu"])
	limCPU, ok4 := k8sMillicores(r.Limits["cpu"])
	if !ok1 || !ok2 || !ok3 || !ok4 || reqMem > limMem || reqCPU > limCPU {
		t.Errorf("resources %v: want parseable quantities, requests within limits", r)
	}
	if limCPU < 1000 {
		t.Errorf("CPU limit %dm: below one core Go's GOMAXPROCS is 1 and bursts are throttled", limCPU)
	}
	env := k8sEnv(t, docs, c)
	if v, ok := env["GOMEMLIMIT"]; ok {
		if n, ok := k8sBytes(v); !ok || n >= limMem {
			t.Errorf("GOMEMLIMIT=%s: want a size below the memory limit (%d bytes)", v, limMem)
		}
	}
}

// kustomize (kubectl kustomize, when kubectl is installed) builds the directory: every
// object lands in the kustomization's namespace and the container gets its image.
func TestKubernetesKustomizeBuild(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl is not installed")
	}
	out, err := exec.Command(kubectl, "kustomize", k8sDir).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v\n%s", k8sDir, err, out)
	}
	docs := k8sManifests(t)
	var k k8sKustomization
	k8sOne(t, docs, "Kustomization", &k)
	built := k8sDecode(t, "kubectl kustomize output", out)
	for _, d := range built {
		if d.Metadata.Namespace != k.Namespace {
			t.Errorf("built %s %s is in namespace %q, want %q", d.Kind, d.Metadata.Name, d.Metadata.Namespace, k.Namespace)
		}
		if d.Kind == "Deployment" {
			_, c := k8sBridge(t, []k8sDoc{d})
			if len(k.Images) == 1 && c.Image != k.Images[0].NewName+":"+k.Images[0].NewTag {
				t.Errorf("built Deployment runs image %s, want %s:%s", c.Image, k.Images[0].NewName, k.Images[0].NewTag)
			}
		}
	}
	if len(built) != len(docs)-1 {
		t.Errorf("kustomize built %d objects; the files hold %d", len(built), len(docs)-1)
	}
}

// k8sFields are the fields Kubernetes (and the Prometheus Operator) defines in the parts
// of the manifests the tests above read, spelled exactly. Those tests decode with
// encoding/json, which matches names regardless of case, while the API server does not:
// readOnlyRootFileSystem would pass them and be dropped by the server (kubectl apply only
// warns). Add a field here when a manifest starts using it.
var k8sFields = map[string][]string{
	"Deployment.spec": {"replicas", "selector", "template", "strategy", "minReadySeconds", "revisionHistoryLimit",
		"paused", "progressDeadlineSeconds"},
	"pod": {"volumes", "initContainers", "containers", "ephemeralContainers", "restartPolicy", "terminationGracePeriodSeconds",
		"activeDeadlineSeconds", "dnsPolicy", "nodeSelector", "serviceAccountName", "automountServiceAccountToken",
		"nodeName", "hostNetwork", "hostPID", "hostIPC", "shareProcessNamespace", "securityContext", "imagePullSecrets",
		"hostname", "subdomain", "affinity", "schedulerName", "tolerations", "hostAliases", "priorityClassName",
		"priority", "dnsConfig", "readinessGates", "runtimeClassName", "enableServiceLinks", "preemptionPolicy",
		"overhead", "topologySpreadConstraints", "setHostnameAsFQDN", "os", "hostUsers", "schedulingGates",
		"resourceClaims", "resources"},
	"podSecurityContext": {"seLinuxOptions", "windowsOptions", "runAsUser", "runAsGroup", "runAsNonRoot",
		"supplementalGroups", "supplementalGroupsPolicy", "fsGroup", "sysctls", "fsGroupChangePolicy",
		"seccompProfile", "appArmorProfile", "seLinuxChangePolicy"},
	"container": {"name", "image", "command", "args", "workingDir", "ports", "envFrom", "env", "resources",
		"resizePolicy", "restartPolicy", "volumeMounts", "volumeDevices", "livenessProbe", "readinessProbe",
		"startupProbe", "lifecycle", "terminationMessagePath", "terminationMessagePolicy", "imagePullPolicy",
		"securityContext", "stdin", "stdinOnce", "tty"},
	"securityContext": {"capabilities", "privileged", "seLinuxOptions", "windowsOptions", "runAsUser", "runAsGroup",
		"runAsNonRoot", "readOnlyRootFilesystem", "allowPrivilegeEscalation", "procMount", "seccompProfile",
		"appArmorProfile"},
	"probe": {"exec", "httpGet", "tcpSocket", "grpc", "initialDelaySeconds", "timeoutSeconds", "periodSeconds",
		"successThreshold", "failureThreshold", "terminationGracePeriodSeconds"},
	"httpGet":         {"path", "port", "host", "scheme", "httpHeaders"},
	"port":            {"name", "hostPort", "containerPort", "protocol", "hostIP"},
	"env":             {"name", "value", "valueFrom"},
	"volumeMount":     {"name", "readOnly", "recursiveReadOnly", "mountPath", "subPath", "mountPropagation", "subPathExpr"},
	"resources":       {"limits", "requests", "claims"},
	"volume":          {"name", "secret", "configMap", "emptyDir", "projected", "persistentVolumeClaim", "csi", "downwardAPI", "ephemeral", "image"},
	"secretVolume":    {"secretName", "items", "defaultMode", "optional"},
	"configMapVolume": {"name", "items", "defaultMode", "optional"},
	"topologySpread": {"maxSkew", "topologyKey", "whenUnsatisfiable", "labelSelector", "minDomains", "nodeAffinityPolicy",
		"nodeTaintsPolicy", "matchLabelKeys"},
	"Service.spec":             {"ports", "selector", "clusterIP", "clusterIPs", "type", "externalIPs", "sessionAffinity", "loadBalancerIP", "loadBalancerSourceRanges", "externalName", "externalTrafficPolicy", "healthCheckNodePort", "publishNotReadyAddresses", "sessionAffinityConfig", "ipFamilies", "ipFamilyPolicy", "allocateLoadBalancerNodePorts", "loadBalancerClass", "internalTrafficPolicy", "trafficDistribution"},
	"servicePort":              {"name", "protocol", "appProtocol", "port", "targetPort", "nodePort"},
	"PodDisruptionBudget.spec": {"minAvailable", "maxUnavailable", "selector", "unhealthyPodEvictionPolicy"},
	"ServiceMonitor.spec": {"jobLabel", "targetLabels", "podTargetLabels", "endpoints", "selector", "selectorMechanism",
		"namespaceSelector", "sampleLimit", "scrapeProtocols", "targetLimit", "labelLimit", "labelNameLengthLimit",
		"labelValueLengthLimit", "keepDroppedTargets", "attachMetadata", "scrapeClass", "bodySizeLimit", "fallbackScrapeProtocol"},
	"monitorEndpoint": {"port", "targetPort", "path", "scheme", "params", "interval", "scrapeTimeout", "tlsConfig",
		"bearerTokenFile", "bearerTokenSecret", "authorization", "honorLabels", "honorTimestamps",
		"trackTimestampsStaleness", "basicAuth", "oauth2", "metricRelabelings", "relabelings", "proxyUrl",
		"followRedirects", "enableHttp2", "filterRunning"},
}

// Every field the manifests set in those parts is one Kubernetes defines there, spelled
// exactly as it does.
func TestKubernetesFieldNames(t *testing.T) {
	docs := k8sManifests(t)
	obj := func(v any) map[string]any { m, _ := v.(map[string]any); return m }
	list := func(v any) []any { l, _ := v.([]any); return l }
	check := func(where, part string, v any) map[string]any {
		m := obj(v)
		for k := range m {
			if !slices.Contains(k8sFields[part], k) {
				t.Errorf("%s: %q is not a field Kubernetes knows there (see k8sFields)", where, k)
			}
		}
		return m
	}
	for _, d := range docs {
		var m map[string]any
		noErr(t, json.Unmarshal(d.raw, &m))
		where := d.File + ": " + d.Kind + " " + d.Metadata.Name + ": spec"
		switch d.Kind {
		case "Deployment":
			spec := check(where, "Deployment.spec", m["spec"])
			pod := check(where+".template.spec", "pod", obj(spec["template"])["spec"])
			check(where+".template.spec.securityContext", "podSecurityContext", pod["securityContext"])
			for i, c := range list(pod["containers"]) {
				cw := fmt.Sprintf("%s.template.spec.containers[%d]", where, i)
				cm := check(cw, "container", c)
				check(cw+".securityContext", "securityContext", cm["securityContext"])
				check(cw+".resources", "resources", cm["resources"])
				for _, p := range []string{"livenessProbe", "readinessProbe", "startupProbe"} {
					pm := check(cw+"."+p, "probe", cm[p])
					check(cw+"."+p+".httpGet", "httpGet", pm["httpGet"])
				}
				for _, sub := range []struct{ key, part string }{{"ports", "port"}, {"env", "env"}, {"volumeMounts", "volumeMount"}} {
					for j, e := range list(cm[sub.key]) {
						check(fmt.Sprintf("%s.%s[%d]", cw, sub.key, j), sub.part, e)
					}
				}
			}
			for i, v := range list(pod["volumes"]) {
				vw := fmt.Sprintf("%s.template.spec.volumes[%d]", where, i)
				vm := check(vw, "volume", v)
				check(vw+".secret", "secretVolume", vm["secret"])
				check(vw+".configMap", "configMapVolume", vm["configMap"])
			}
			for i, c := range list(pod["topologySpreadConstraints"]) {
				check(fmt.Sprintf("%s.template.spec.topologySpreadConstraints[%d]", where, i), "topologySpread", c)
			}
		case "Service":
			spec := check(where, "Service.spec", m["spec"])
			for i, p := range list(spec["ports"]) {
				check(fmt.Sprintf("%s.ports[%d]", where, i), "servicePort", p)
			}
		case "PodDisruptionBudget":
			check(where, "PodDisruptionBudget.spec", m["spec"])
		case "ServiceMonitor":
			spec := check(where, "ServiceMonitor.spec", m["spec"])
			for i, e := range list(spec["endpoints"]) {
				check(fmt.Sprintf("%s.endpoints[%d]", where, i), "monitorEndpoint", e)
			}
		}
	}
}
