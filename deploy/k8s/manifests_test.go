package k8s

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// The Gateway API and inference-extension kinds are not in k8s.io/api:
// the fields the manifests use, decoded as strictly.
type objectMeta struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels,omitempty"`
}

type inferencePool struct {
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Metadata   objectMeta `json:"metadata"`
	Spec       struct {
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
		TargetPorts []struct {
			Number int `json:"number"`
		} `json:"targetPorts"`
		EndpointPickerRef struct {
			Name string `json:"name"`
			Port struct {
				Number int `json:"number"`
			} `json:"port"`
		} `json:"endpointPickerRef"`
	} `json:"spec"`
}

type httpRoute struct {
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Metadata   objectMeta `json:"metadata"`
	Spec       struct {
		ParentRefs []struct {
			Name string `json:"name"`
		} `json:"parentRefs"`
		Rules []struct {
			BackendRefs []struct {
				Group string `json:"group"`
				Kind  string `json:"kind"`
				Name  string `json:"name"`
			} `json:"backendRefs"`
			Matches []struct {
				Path struct {
					Type  string `json:"type"`
					Value string `json:"value"`
				} `json:"path"`
			} `json:"matches"`
		} `json:"rules"`
	} `json:"spec"`
}

// eppConfig is llm-d's EndpointPickerConfig as the example writes it.
type eppConfig struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Plugins    []struct {
		Type       string         `json:"type"`
		Parameters map[string]any `json:"parameters,omitempty"`
	} `json:"plugins"`
	DataLayer struct {
		Sources []struct {
			PluginRef  string `json:"pluginRef"`
			Extractors []struct {
				PluginRef string `json:"pluginRef"`
			} `json:"extractors"`
		} `json:"sources"`
	} `json:"dataLayer"`
	SchedulingProfiles []struct {
		Name    string `json:"name"`
		Plugins []struct {
			PluginRef string `json:"pluginRef"`
			Weight    int    `json:"weight,omitempty"`
		} `json:"plugins"`
	} `json:"schedulingProfiles"`
}

// manifests are every document of every YAML file here, decoded strictly
// (an unknown or misspelt field fails) into its kind's type.
func manifests(t *testing.T) map[string][]any {
	t.Helper()
	files, err := filepath.Glob("*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	out := map[string][]any{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(b), -1) {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			var head struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
			}
			if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
				t.Fatalf("%s document %d: %v", f, i, err)
			}
			var v any
			switch head.APIVersion + " " + head.Kind {
			case "apps/v1 Deployment":
				v = &appsv1.Deployment{}
			case "v1 Service":
				v = &corev1.Service{}
			case "v1 Secret":
				v = &corev1.Secret{}
			case "v1 ConfigMap":
				v = &corev1.ConfigMap{}
			case "v1 ServiceAccount":
				v = &corev1.ServiceAccount{}
			case "policy/v1 PodDisruptionBudget":
				v = &policyv1.PodDisruptionBudget{}
			case "autoscaling/v2 HorizontalPodAutoscaler":
				v = &autoscalingv2.HorizontalPodAutoscaler{}
			case "networking.k8s.io/v1 NetworkPolicy":
				v = &networkingv1.NetworkPolicy{}
			case "batch/v1 Job":
				v = &batchv1.Job{}
			case "rbac.authorization.k8s.io/v1 Role":
				v = &rbacv1.Role{}
			case "rbac.authorization.k8s.io/v1 RoleBinding":
				v = &rbacv1.RoleBinding{}
			case "inference.networking.k8s.io/v1 InferencePool":
				v = &inferencePool{}
			case "gateway.networking.k8s.io/v1 HTTPRoute":
				v = &httpRoute{}
			default:
				t.Fatalf("%s document %d: no type for %s %s", f, i, head.APIVersion, head.Kind)
			}
			if err := yaml.UnmarshalStrict([]byte(doc), v); err != nil {
				t.Fatalf("%s document %d (%s): %v", f, i, head.Kind, err)
			}
			out[head.Kind] = append(out[head.Kind], v)
		}
	}
	return out
}

func stripComments(doc string) string {
	var b bytes.Buffer
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// Every manifest decodes strictly, and the serving ones hold together:
// probes on /healthz, the grace period past --grace, the ports the events
// flags bind in the Service and the router's pod discovery, the router's
// block size the server's, the Secret the API keys file mounts, the
// autoscaler and disruption budget on the Deployment's pods.
func TestManifests(t *testing.T) {
	s := loadServing(t)
	s.checkContainer(t)
	s.checkKeys(t)
	s.checkService(t)
	s.checkSelectors(t)
	s.checkEPP(t)
}

// serving is the manifests (by kind) and what TestManifests checks them
// by: the server's and the router's Deployments, the server's pod and
// container, its container ports by name, and flag, the value of one of
// its --flags.
type serving struct {
	m          map[string][]any
	serve, epp *appsv1.Deployment
	pod        corev1.PodTemplateSpec
	c          corev1.Container
	ports      map[string]int32
	flag       func(name string) string
}

func loadServing(t *testing.T) serving {
	s := serving{m: manifests(t), ports: map[string]int32{}}
	for _, d := range s.m["Deployment"] {
		switch d := d.(*appsv1.Deployment); d.Name {
		case "dlmcache":
			s.serve = d
		case "dlmcache-epp":
			s.epp = d
		}
	}
	if s.serve == nil || s.epp == nil {
		t.Fatal("the dlmcache and dlmcache-epp Deployments")
	}
	s.pod = s.serve.Spec.Template
	s.c = s.pod.Spec.Containers[0]
	args := strings.Join(s.c.Args, " ")
	s.flag = func(name string) string {
		m := regexp.MustCompile(`--` + name + `[ =]'?([^' ]+)`).FindStringSubmatch(args)
		if m == nil {
			t.Fatalf("serve args lack --%s: %s", name, args)
		}
		return m[1]
	}
	for _, p := range s.c.Ports {
		s.ports[p.Name] = p.ContainerPort
	}
	return s
}

// checkContainer: the probes, the grace period, resources, and the ports
// the flags bind.
func (s serving) checkContainer(t *testing.T) {
	c, pod := s.c, s.pod
	for _, p := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe, c.StartupProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" || p.HTTPGet.Port.StrVal != "http" {
			t.Errorf("probe %+v: want GET /healthz on the http port", p)
		}
	}
	grace, err := time.ParseDuration(s.flag("grace"))
	if err != nil || pod.Spec.TerminationGracePeriodSeconds == nil || time.Duration(*pod.Spec.TerminationGracePeriodSeconds)*time.Second <= grace {
		t.Errorf("terminationGracePeriodSeconds %v not past --grace %v", pod.Spec.TerminationGracePeriodSeconds, grace)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources %+v", c.Resources)
	}
	for name, f := range map[string]string{"http": "addr", "kv-events": "kv-events", "kv-replay": "kv-events-replay"} {
		v := s.flag(f)
		if !strings.HasSuffix(v, ":"+strconv.Itoa(int(s.ports[name]))) {
			t.Errorf("--%s %s, container port %s %d", f, v, name, s.ports[name])
		}
	}
}

// checkKeys: the API keys are a Secret mounted where --api-key-file reads.
func (s serving) checkKeys(t *testing.T) {
	keyFile := s.flag("api-key-file")
	var secretName string
	for _, v := range s.pod.Spec.Volumes {
		if v.Secret != nil {
			secretName = v.Secret.SecretName
			if *v.Secret.DefaultMode != 0o400 {
				t.Errorf("the keys' mode %o", *v.Secret.DefaultMode)
			}
			for _, vm := range s.c.VolumeMounts {
				if vm.Name == v.Name && filepath.Join(vm.MountPath, v.Secret.Items[0].Path) != keyFile {
					t.Errorf("the Secret lands at %s, --api-key-file reads %s", filepath.Join(vm.MountPath, v.Secret.Items[0].Path), keyFile)
				}
			}
		}
	}
	if sec := s.m["Secret"]; len(sec) != 1 || sec[0].(*corev1.Secret).Name != secretName {
		t.Errorf("the Secret %q (example) is not the one mounted", secretName)
	}
}

// checkService: the Service carries HTTP and both event ports.
func (s serving) checkService(t *testing.T) {
	var svcPorts []string
	for _, sv := range s.m["Service"] {
		if sv := sv.(*corev1.Service); sv.Name == "dlmcache" {
			for _, p := range sv.Spec.Ports {
				svcPorts = append(svcPorts, p.Name)
				if p.TargetPort.StrVal == "" || s.ports[p.TargetPort.StrVal] == 0 {
					t.Errorf("service port %s targets %v, no container port", p.Name, p.TargetPort)
				}
			}
		}
	}
	if strings.Join(svcPorts, ",") != "http,kv-events,kv-replay" {
		t.Errorf("service ports %v", svcPorts)
	}
}

// checkSelectors: the disruption budget, autoscaler, network policy and
// inference pool are on the server's pods; only the router's pods reach
// the event sockets.
func (s serving) checkSelectors(t *testing.T) {
	labels, ports := s.pod.Labels, s.ports
	matches := func(sel map[string]string) bool {
		for k, v := range sel {
			if labels[k] != v {
				return false
			}
		}
		return len(sel) > 0
	}
	pdb := s.m["PodDisruptionBudget"][0].(*policyv1.PodDisruptionBudget)
	if !matches(pdb.Spec.Selector.MatchLabels) {
		t.Errorf("the PDB selects %v, the pods are %v", pdb.Spec.Selector.MatchLabels, labels)
	}
	hpa := s.m["HorizontalPodAutoscaler"][0].(*autoscalingv2.HorizontalPodAutoscaler)
	if hpa.Spec.ScaleTargetRef.Name != s.serve.Name || hpa.Spec.Metrics[0].Pods.Metric.Name != "dlmcache_requests_queued" {
		t.Errorf("the HPA %+v", hpa.Spec)
	}
	np := s.m["NetworkPolicy"][0].(*networkingv1.NetworkPolicy)
	if !matches(np.Spec.PodSelector.MatchLabels) {
		t.Errorf("the NetworkPolicy selects %v", np.Spec.PodSelector.MatchLabels)
	}
	for _, r := range np.Spec.Ingress {
		for _, p := range r.Ports {
			if n := p.Port.IntVal; (n == ports["kv-events"] || n == ports["kv-replay"]) &&
				(len(r.From) != 1 || r.From[0].PodSelector.MatchLabels["app"] != s.epp.Spec.Template.Labels["app"]) {
				t.Errorf("event port %d open to %+v, want the EPP's pods only", n, r.From)
			}
		}
	}
	pool := s.m["InferencePool"][0].(*inferencePool)
	if !matches(pool.Spec.Selector.MatchLabels) || pool.Spec.TargetPorts[0].Number != int(ports["http"]) || pool.Spec.EndpointPickerRef.Name != s.epp.Name {
		t.Errorf("the InferencePool %+v", pool.Spec)
	}
}

// checkEPP: the EPP's configuration decodes strictly too, its block size
// and socket port the server's, and the server writes no extra keys.
func (s serving) checkEPP(t *testing.T) {
	var cfg eppConfig
	for _, cm := range s.m["ConfigMap"] {
		if err := yaml.UnmarshalStrict([]byte(cm.(*corev1.ConfigMap).Data["epp-config.yaml"]), &cfg); err != nil {
			t.Fatalf("the EPP config: %v", err)
		}
	}
	found := false
	for _, p := range cfg.Plugins {
		if p.Type != "precise-prefix-cache-producer" {
			continue
		}
		found = true
		bs := p.Parameters["tokenProcessorConfig"].(map[string]any)["blockSize"]
		ev := p.Parameters["kvEventsConfig"].(map[string]any)
		disc := ev["podDiscoveryConfig"].(map[string]any)
		if strconv.Itoa(int(bs.(float64))) != s.flag("store-blocks") || int32(disc["socketPort"].(float64)) != s.ports["kv-events"] || ev["topicFilter"] != "kv@" {
			t.Errorf("the scorer's block size %v / socket port %v / topic %v against --store-blocks %s and port %d", bs, disc["socketPort"], ev["topicFilter"], s.flag("store-blocks"), s.ports["kv-events"])
		}
	}
	if !found {
		t.Error("no precise-prefix-cache-producer in the EPP config")
	}
	// llm-d keys a block by its extra keys' strings too, a request by its
	// tokens alone: with any extra key written it matches nothing.
	if x := s.flag("kv-events-extra-keys"); x != "none" {
		t.Errorf("--kv-events-extra-keys %s: llm-d's scorer matches no block that carries an extra key", x)
	}
}

// The strict decoding this rests on: a misspelt field fails.
func TestStrictDecodingFailsOnTypos(t *testing.T) {
	doc := "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n  replica: 2\n"
	if err := yaml.UnmarshalStrict([]byte(doc), &appsv1.Deployment{}); err == nil {
		t.Error("spec.replica (for replicas) decoded")
	}
	if err := yaml.UnmarshalStrict([]byte("plugins: []\nschedulingProfile: []\n"), &eppConfig{}); err == nil {
		t.Error("schedulingProfile (for schedulingProfiles) decoded")
	}
}
