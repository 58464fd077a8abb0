package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The deployment examples under deployments/, checked here: they parse,
// every lockcelld subcommand, flag and config key they name exists, the
// StatefulSet has the shape docs/operations.md ("Deploying") promises, and
// the Secrets that secrets.sh makes hold configs a replica loads as its pod
// sees them.
const (
	systemdUnit = "deployments/systemd/lockcelld@.service"
	k8sDir      = "deployments/kubernetes"
)

// subcommandFlags returns the flags `lockcelld SUB --help` lists, or nil
// for an unknown subcommand.
func subcommandFlags(t *testing.T, sub string) map[string]bool {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := run([]string{sub, "--help"}, &stdout, &stderr); code != exitOK {
		return nil
	}
	flags := map[string]bool{}
	re := regexp.MustCompile(`(?m)^\s+-([A-Za-z0-9][A-Za-z0-9-]*)`)
	for _, m := range re.FindAllStringSubmatch(stdout.String(), -1) {
		flags[m[1]] = true
	}
	if len(flags) == 0 {
		t.Fatalf("lockcelld %s --help lists no flags:\n%s", sub, stdout.String())
	}
	return flags
}

// configKeys returns the JSON keys of a replica config (fileConfig).
func configKeys() map[string]bool {
	keys := map[string]bool{}
	ty := reflect.TypeFor[fileConfig]()
	for i := range ty.NumField() {
		name, _, _ := strings.Cut(ty.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			keys[name] = true
		}
	}
	return keys
}

// invocationRE finds a lockcelld command line: the binary (by name, or as
// the $LOCKCELLD of a script), its subcommand and its arguments up to the
// end of the shell command.
var invocationRE = regexp.MustCompile(`(?:lockcelld|"?\$LOCKCELLD"?)[ \t]+([A-Za-z-]+)([^\n;&|]*)`)

// checkInvocations checks every lockcelld command line in text: its
// subcommand exists and takes every flag given. It returns how many it
// checked.
func checkInvocations(t *testing.T, where, text string) int {
	t.Helper()
	n := 0
	for _, m := range invocationRE.FindAllStringSubmatch(text, -1) {
		sub := m[1]
		flags := subcommandFlags(t, sub)
		if flags == nil {
			t.Errorf("%s: `lockcelld %s`: no such subcommand", where, sub)
			continue
		}
		for _, tok := range strings.Fields(m[2]) {
			if !strings.HasPrefix(tok, "-") {
				continue
			}
			name, _, _ := strings.Cut(strings.TrimLeft(tok, "-"), "=")
			if !flags[name] {
				t.Errorf("%s: `lockcelld %s` has no flag %q", where, sub, tok)
			}
			n++
		}
		n++
	}
	return n
}

// parseUnit parses a systemd unit file: sections of Key=Value lines,
// comments starting with # or ;.
func parseUnit(text string) (map[string]map[string][]string, error) {
	out := map[string]map[string][]string{}
	var section string
	sc := bufio.NewScanner(strings.NewReader(text))
	for line := 1; sc.Scan(); line++ {
		s := strings.TrimSpace(sc.Text())
		switch {
		case s == "" || s[0] == '#' || s[0] == ';':
		case strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]"):
			section = s[1 : len(s)-1]
			if out[section] != nil {
				return nil, fmt.Errorf("line %d: section [%s] twice", line, section)
			}
			out[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(s, "=")
			if !ok || section == "" || !regexp.MustCompile(`^[A-Z][A-Za-z]+$`).MatchString(k) || strings.HasSuffix(s, `\`) {
				return nil, fmt.Errorf("line %d: not a Key=Value line in a section: %q", line, s)
			}
			out[section][k] = append(out[section][k], v)
		}
	}
	return out, sc.Err()
}

func TestSystemdUnit(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("../..", systemdUnit))
	if err != nil {
		t.Fatal(err)
	}
	unit, err := parseUnit(string(b))
	if err != nil {
		t.Fatalf("%s: %v", systemdUnit, err)
	}
	for s := range unit {
		if !slices.Contains([]string{"Unit", "Service", "Install"}, s) {
			t.Errorf("%s: unexpected section [%s]", systemdUnit, s)
		}
	}
	svc := unit["Service"]
	start := svc["ExecStart"]
	if len(start) != 1 || !strings.Contains(start[0], "lockcelld serve") || !strings.Contains(start[0], "replica-%i.json") {
		t.Fatalf("%s: ExecStart %q; want one `lockcelld serve` of the instance's replica-%%i.json", systemdUnit, start)
	}
	n := checkInvocations(t, systemdUnit, start[0])
	// The config lives where StateDirectory puts it.
	if sd := svc["StateDirectory"]; len(sd) != 1 || !strings.Contains(start[0], "/var/lib/"+sd[0]+"/") {
		t.Errorf("%s: the config is not under StateDirectory %q: %s", systemdUnit, sd, start[0])
	}
	if len(unit["Install"]["WantedBy"]) == 0 {
		t.Errorf("%s: no WantedBy: it cannot be enabled", systemdUnit)
	}
	t.Logf("%s: %d sections, %d lockcelld commands and flags checked", systemdUnit, len(unit), n)
	if n < 3 {
		t.Fatalf("checked only %d lockcelld commands and flags; want at least 3", n)
	}
}

// k8sObject is the part of a Kubernetes object these tests look at.
type k8sObject struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec json.RawMessage `json:"spec"`
}

type k8sProbe struct {
	HTTPGet *struct {
		Path string `json:"path"`
		Port any    `json:"port"`
	} `json:"httpGet"`
}

type k8sContainer struct {
	Name    string   `json:"name"`
	Command []string `json:"command"`
	Ports   []struct {
		Name          string `json:"name"`
		ContainerPort int    `json:"containerPort"`
		Protocol      string `json:"protocol"`
	} `json:"ports"`
	LivenessProbe  *k8sProbe `json:"livenessProbe"`
	ReadinessProbe *k8sProbe `json:"readinessProbe"`
	VolumeMounts   []struct {
		Name      string `json:"name"`
		MountPath string `json:"mountPath"`
	} `json:"volumeMounts"`
}

type k8sStatefulSet struct {
	ServiceName         string `json:"serviceName"`
	Replicas            int    `json:"replicas"`
	PodManagementPolicy string `json:"podManagementPolicy"`
	Selector            struct {
		MatchLabels map[string]string `json:"matchLabels"`
	} `json:"selector"`
	Template struct {
		Metadata struct {
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
		Spec struct {
			Affinity struct {
				PodAntiAffinity struct {
					Required []struct {
						TopologyKey   string `json:"topologyKey"`
						LabelSelector struct {
							MatchLabels map[string]string `json:"matchLabels"`
						} `json:"labelSelector"`
					} `json:"requiredDuringSchedulingIgnoredDuringExecution"`
				} `json:"podAntiAffinity"`
			} `json:"affinity"`
			InitContainers []k8sContainer `json:"initContainers"`
			Containers     []k8sContainer `json:"containers"`
			Volumes        []struct {
				Name   string `json:"name"`
				Secret *struct {
					SecretName string `json:"secretName"`
				} `json:"secret"`
			} `json:"volumes"`
		} `json:"spec"`
	} `json:"template"`
	VolumeClaimTemplates []struct {
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
	} `json:"volumeClaimTemplates"`
}

type k8sService struct {
	ClusterIP                string            `json:"clusterIP"`
	PublishNotReadyAddresses bool              `json:"publishNotReadyAddresses"`
	Selector                 map[string]string `json:"selector"`
	Ports                    []struct {
		Name     string `json:"name"`
		Port     int    `json:"port"`
		Protocol string `json:"protocol"`
	} `json:"ports"`
}

// TestKubernetesManifests checks deployments/kubernetes: every manifest is
// a JSON object Kubernetes can take; the StatefulSet runs five replicas one
// per node, in parallel (a replica is not ready without a quorum), probes
// /readyz and /healthz on the port the Service and the configs use, keeps
// data on a PersistentVolumeClaim and takes its configs and certificates
// from the Secrets secrets.sh makes; the headless Service publishes
// addresses of pods that are not ready yet (peers must find each other
// before any is ready); every lockcelld flag and config key named exists.
func TestKubernetesManifests(t *testing.T) {
	dir := filepath.Join("../..", k8sDir)
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(files) < 2 {
		t.Fatalf("%s: manifests %v (%v); want at least the Service and the StatefulSet", k8sDir, files, err)
	}
	objs := map[string]k8sObject{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var o k8sObject
		if err := json.Unmarshal(b, &o); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if o.APIVersion == "" || o.Kind == "" || o.Metadata.Name == "" || len(o.Spec) == 0 {
			t.Fatalf("%s: no apiVersion, kind, metadata.name or spec", f)
		}
		objs[o.Kind] = o
	}
	var ss k8sStatefulSet
	var svc k8sService
	if err := json.Unmarshal(objs["StatefulSet"].Spec, &ss); err != nil {
		t.Fatalf("StatefulSet: %v", err)
	}
	if err := json.Unmarshal(objs["Service"].Spec, &svc); err != nil {
		t.Fatalf("Service: %v", err)
	}
	checks := 0
	check := func(ok bool, format string, args ...any) {
		t.Helper()
		checks++
		if !ok {
			t.Errorf(format, args...)
		}
	}
	labels := ss.Template.Metadata.Labels
	check(ss.Replicas == 5, "StatefulSet replicas %d; want 5", ss.Replicas)
	check(ss.PodManagementPolicy == "Parallel", "podManagementPolicy %q; want Parallel (OrderedReady waits for a ready pod 0, which needs a quorum)", ss.PodManagementPolicy)
	check(reflect.DeepEqual(ss.Selector.MatchLabels, labels) && len(labels) > 0, "selector %v does not match the pod labels %v", ss.Selector.MatchLabels, labels)
	aa := ss.Template.Spec.Affinity.PodAntiAffinity.Required
	check(len(aa) == 1 && aa[0].TopologyKey == "kubernetes.io/hostname" && reflect.DeepEqual(aa[0].LabelSelector.MatchLabels, labels),
		"pod anti-affinity %+v; want required, per kubernetes.io/hostname, against the cell's own pods", aa)
	check(ss.ServiceName == objs["Service"].Metadata.Name, "serviceName %q; the Service is %q", ss.ServiceName, objs["Service"].Metadata.Name)
	check(svc.ClusterIP == "None", "Service clusterIP %q; want None (headless: one name per pod)", svc.ClusterIP)
	check(svc.PublishNotReadyAddresses, "Service does not publish not-ready addresses: no replica could find its peers before a quorum")
	check(reflect.DeepEqual(svc.Selector, labels), "Service selector %v; pod labels %v", svc.Selector, labels)

	if len(ss.Template.Spec.Containers) != 1 {
		t.Fatalf("StatefulSet: %d containers; want 1", len(ss.Template.Spec.Containers))
	}
	c := ss.Template.Spec.Containers[0]
	ports := map[string]int{}
	for _, p := range c.Ports {
		ports[p.Name+"/"+p.Protocol] = p.ContainerPort
	}
	for _, p := range svc.Ports {
		check(ports[p.Name+"/"+p.Protocol] == p.Port, "Service port %s %d/%s is no container port of that name (%v)", p.Name, p.Port, p.Protocol, ports)
	}
	check(ports["peer/UDP"] != 0 && ports["http/TCP"] != 0, "container ports %v; want peer (UDP, QUIC) and http (TCP)", ports)
	for _, pr := range []struct {
		name  string
		probe *k8sProbe
		path  string
	}{{"liveness", c.LivenessProbe, "/healthz"}, {"readiness", c.ReadinessProbe, "/readyz"}} {
		ok := pr.probe != nil && pr.probe.HTTPGet != nil && pr.probe.HTTPGet.Path == pr.path &&
			(pr.probe.HTTPGet.Port == "http" || pr.probe.HTTPGet.Port == float64(ports["http/TCP"]))
		check(ok, "%s probe %+v; want GET %s on the http port", pr.name, pr.probe, pr.path)
	}
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	secrets := map[string]string{}
	for _, v := range ss.Template.Spec.Volumes {
		if v.Secret != nil {
			secrets[v.Name] = v.Secret.SecretName
		}
	}
	check(len(ss.VolumeClaimTemplates) == 1 && mounts[ss.VolumeClaimTemplates[0].Metadata.Name] != "",
		"the data volume claim %+v is not mounted in the container (%v)", ss.VolumeClaimTemplates, mounts)

	// The lockcelld command lines, in the containers and in secrets.sh.
	var cmds []string
	for _, ic := range append(ss.Template.Spec.InitContainers, c) {
		cmds = append(cmds, strings.Join(ic.Command, " "))
	}
	n := checkInvocations(t, "statefulset.json", strings.Join(cmds, "\n"))
	cfgRE := regexp.MustCompile(`--config (\S+)/replica-`)
	m := cfgRE.FindStringSubmatch(cmds[len(cmds)-1])
	check(m != nil && mounts["config"] == m[1] && secrets["config"] != "", "the container's --config is not in the config Secret's mount (%q, mounts %v)", m, mounts)
	script, err := os.ReadFile(filepath.Join(dir, "secrets.sh"))
	if err != nil {
		t.Fatal(err)
	}
	n += checkInvocations(t, "secrets.sh", string(script))
	keys := configKeys()
	for _, m := range regexp.MustCompile(`"([a-z_]+)": `).FindAllStringSubmatch(string(script), -1) {
		check(keys[m[1]], "secrets.sh: %q is no replica config key", m[1])
	}
	t.Logf("%s: %d objects, %d structure checks, %d lockcelld commands and flags", k8sDir, len(objs), checks, n)
	if checks < 15 || n < 8 {
		t.Fatalf("judged only %d structure checks and %d commands and flags; want at least 15 and 8", checks, n)
	}

	// secrets.sh with the real lockcelld and a kubectl that records what
	// it was asked: each pod's view of the lockcell Secret must hold a
	// config that loads, with its certificates, and never the CA's key.
	if _, err := exec.LookPath("sed"); err != nil {
		t.Fatalf("secrets.sh needs sed: %v", err)
	}
	work := t.TempDir()
	record := filepath.Join(work, "kubectl.log")
	kubectl := filepath.Join(work, "kubectl")
	if err := os.WriteFile(kubectl, []byte("#!/bin/sh\nfor a in \"$@\"; do echo \"$a\"; done >>"+record+"\necho END >>"+record+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	abs, _ := filepath.Abs(filepath.Join(dir, "secrets.sh"))
	sh := exec.Command("sh", abs)
	sh.Dir = work
	sh.Env = append(os.Environ(), "NS=prod", "LOCKCELLD="+lockcelldBinary(t), "KUBECTL="+kubectl)
	if out, err := sh.CombinedOutput(); err != nil {
		t.Fatalf("secrets.sh: %v\n%s", err, out)
	}
	logb, err := os.ReadFile(record)
	if err != nil {
		t.Fatal(err)
	}
	made := map[string][]string{} // secret name → files
	for call := range strings.SplitSeq(strings.TrimSuffix(string(logb), "END\n"), "END\n") {
		args := strings.Split(strings.TrimSpace(call), "\n")
		i := slices.Index(args, "generic")
		if i < 0 || i+1 >= len(args) || !slices.Contains(args, "secret") {
			t.Fatalf("secrets.sh ran kubectl %q; want create secret generic", args)
		}
		for _, a := range args[i+2:] {
			if f, ok := strings.CutPrefix(a, "--from-file="); ok {
				made[args[i+1]] = append(made[args[i+1]], f)
			}
		}
	}
	for vol, name := range secrets {
		check(len(made[name]) > 0, "secrets.sh makes no Secret %q (volume %q)", name, vol)
	}
	pod := filepath.Join(work, "pod-view") // /etc/lockcell as a pod sees it
	if err := os.Mkdir(pod, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range made[secrets["config"]] {
		if strings.Contains(f, "=") || filepath.Base(f) == "ca-key.pem" {
			t.Fatalf("the config Secret gets %q (renamed, or the CA's private key)", f)
		}
		b, err := os.ReadFile(filepath.Join(work, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(pod, filepath.Base(f)), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for id := 1; id <= 5; id++ {
		file := filepath.Join(pod, fmt.Sprintf("replica-%d.json", id))
		fc, err := readFileConfig(file)
		if err != nil {
			t.Fatalf("replica %d: %v", id, err)
		}
		if _, err := fc.replicaConfig(file, nil); err != nil {
			t.Errorf("replica %d's config does not load in the pod's view of the Secret: %v", id, err)
		}
		check(fc.HTTPAddr == fmt.Sprintf("0.0.0.0:%d", ports["http/TCP"]), "replica %d http_addr %q; the probes use port %d", id, fc.HTTPAddr, ports["http/TCP"])
		check(strings.HasPrefix(fc.DataDir, mounts["data"]+"/"), "replica %d data_dir %q is not on the data volume %q", id, fc.DataDir, mounts["data"])
		want := fmt.Sprintf("lockcell-%d.%s.prod.svc.cluster.local:%d", id-1, ss.ServiceName, ports["peer/UDP"])
		check(fc.Replicas[fmt.Sprint(id)] == want, "replica %d's address %q; want pod lockcell-%d's name under the Service, %q", id, fc.Replicas[fmt.Sprint(id)], id-1, want)
	}
	var marker []string
	for _, name := range secrets {
		for _, f := range made[name] {
			if filepath.Base(f) == "lockcell-new-member" {
				marker = append(marker, name)
			}
		}
	}
	check(len(marker) == 1 && marker[0] != secrets["config"], "the new-member marker is in Secrets %v; want one of its own, deleted after the first start", marker)
	t.Logf("secrets.sh: %d Secrets, 5 replica configs loaded as a pod sees them; %d checks in all", len(made), checks)
}

// TestDeployingDocs checks the lockcelld commands docs/operations.md's
// "Deploying" section tells operators to run, and that it names each file
// it documents.
func TestDeployingDocs(t *testing.T) {
	b, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, "\n## Deploying\n")
	if i < 0 {
		t.Fatal(`docs/operations.md has no "Deploying" section`)
	}
	s = s[i+1:]
	if j := strings.Index(s[3:], "\n## "); j >= 0 {
		s = s[:j+3]
	}
	for _, f := range []string{systemdUnit, k8sDir + "/secrets.sh"} {
		if !strings.Contains(s, f) {
			t.Errorf(`"Deploying" does not name %s`, f)
		}
	}
	n := checkInvocations(t, "docs/operations.md", s)
	t.Logf(`"Deploying": %d lockcelld commands and flags checked`, n)
	if n < 4 {
		t.Fatalf("checked only %d lockcelld commands and flags; want at least 4", n)
	}
}

// k8sExpand does what Kubernetes does to a container's command before it
// runs: $(VAR) is replaced by the container's env var VAR, $$ becomes $.
func k8sExpand(s string, env map[string]string) string {
	re := regexp.MustCompile(`\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)
	return re.ReplaceAllStringFunc(s, func(m string) string {
		if m == "$$" {
			return "$"
		}
		if v, ok := env[m[2:len(m)-1]]; ok {
			return v
		}
		return m
	})
}

// TestKubernetesPodCommands runs the StatefulSet's shell commands as a pod
// would (expanded as Kubernetes expands them), with paths moved into a
// temporary directory: pod lockcell-K serves replica K+1's config, and the
// init container marks an empty volume as a new member only while the
// lockcell-new-cell Secret is mounted, and never a volume that has a store.
func TestKubernetesPodCommands(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("../..", k8sDir, "statefulset.json"))
	if err != nil {
		t.Fatal(err)
	}
	var o k8sObject
	var ss k8sStatefulSet
	if err := json.Unmarshal(b, &o); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(o.Spec, &ss); err != nil {
		t.Fatal(err)
	}
	spec := ss.Template.Spec
	if len(spec.Containers) != 1 || len(spec.InitContainers) != 1 {
		t.Fatalf("want one container and one init container")
	}
	shell := func(cmd []string, env ...string) (string, error) {
		t.Helper()
		if len(cmd) != 3 || cmd[0] != "/bin/sh" || cmd[1] != "-c" {
			t.Fatalf("command %q is not /bin/sh -c SCRIPT", cmd)
		}
		c := exec.Command("sh", "-c", cmd[2])
		c.Env = append(os.Environ(), env...)
		out, err := c.CombinedOutput()
		return string(out), err
	}
	serve := spec.Containers[0].Command
	checks := 0
	for k := range ss.Replicas {
		pod := fmt.Sprintf("%s-%d", o.Metadata.Name, k)
		cmd := slices.Clone(serve)
		cmd[2] = strings.Replace(k8sExpand(cmd[2], nil), "exec /usr/local/bin/lockcelld ", "exec echo ", 1)
		out, err := shell(cmd, "POD_NAME="+pod)
		want := fmt.Sprintf("serve --config /etc/lockcell/replica-%d.json", k+1)
		if err != nil || !strings.Contains(out, want) {
			t.Errorf("pod %s runs %q (%v); want %q", pod, out, err, want)
		}
		checks++
	}

	initCmd := spec.InitContainers[0].Command
	for _, tc := range []struct {
		name             string
		secret, hasStore bool
		wantMarker       bool
	}{
		{"first start of a new cell", true, false, true},
		{"restart with a store, secret still there", true, true, false},
		{"new empty volume after the first start", false, false, false},
	} {
		root := t.TempDir()
		vol, secret := filepath.Join(root, "vol"), filepath.Join(root, "new-cell")
		for _, d := range []string{vol, secret} {
			if err := os.Mkdir(d, 0o700); err != nil {
				t.Fatal(err)
			}
		}
		if tc.secret {
			if err := os.WriteFile(filepath.Join(secret, "lockcell-new-member"), []byte("new\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if tc.hasStore {
			if err := os.MkdirAll(filepath.Join(vol, "data"), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(vol, "data", "000001.log"), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		cmd := slices.Clone(initCmd)
		cmd[2] = strings.NewReplacer("/var/lib/lockcell", vol, "/new-cell", secret).Replace(k8sExpand(cmd[2], nil))
		if out, err := shell(cmd); err != nil {
			t.Fatalf("%s: init container: %v\n%s", tc.name, err, out)
		}
		_, err := os.Stat(filepath.Join(vol, "data", "lockcell-new-member"))
		if got := err == nil; got != tc.wantMarker {
			t.Errorf("%s: new-member marker written %v; want %v", tc.name, got, tc.wantMarker)
		}
		checks++
	}
	t.Logf("%d pod commands run", checks)
	if checks != ss.Replicas+3 || ss.Replicas != 5 {
		t.Fatalf("ran %d pod commands for %d replicas; want 8 for 5", checks, ss.Replicas)
	}
}
