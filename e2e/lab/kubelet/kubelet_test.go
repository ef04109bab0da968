package kubelet

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestPodNetnsName(t *testing.T) {
	if got := PodNetnsName("hlab", "default", "web-1"); got != "hlab-pod-default-web-1" {
		t.Errorf("short name: %q", got)
	}
	long := strings.Repeat("a", 63)
	a := PodNetnsName("hlab", "default", long)
	b := PodNetnsName("hlab", "default", long[:62]+"b")
	if len(a) > MaxNetnsName || len(b) > MaxNetnsName {
		t.Errorf("too long: %q (%d) %q (%d)", a, len(a), b, len(b))
	}
	if a == b {
		t.Errorf("distinct pods share namespace name %q", a)
	}
	if !strings.HasPrefix(a, "hlab-pod-default-aaa") {
		t.Errorf("long name lost its readable start: %q", a)
	}
	if v := HostVethName("4c5e6a0e-0000-4000-8000-000000000001"); len(v) > 15 || !strings.HasPrefix(v, "veth") {
		t.Errorf("veth name %q", v)
	}
}

func TestExpand(t *testing.T) {
	env := map[string]string{"A": "x", "NODE": "node1"}
	for in, want := range map[string]string{
		"plain":          "plain",
		"$(A)":           "x",
		"--node=$(NODE)": "--node=node1",
		"$(MISSING)":     "$(MISSING)",
		"$$(A)":          "$(A)",
		"$$":             "$",
		"a$":             "a$",
		"$(A":            "$(A",
		"$(A)$(NODE)":    "xnode1",
	} {
		if got := Expand(in, env); got != want {
			t.Errorf("Expand(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestCommand(t *testing.T) {
	p := Programs{EchoServer: "/bin/echoserver", Herald: "/bin/herald"}
	env := map[string]string{"NODE": "node2"}
	prog, args, err := p.command(&v1.Container{Image: "registry.k8s.io/echoserver:1.4"}, env)
	if err != nil || prog != "/bin/echoserver" || len(args) != 0 {
		t.Errorf("echoserver: %q %q %v", prog, args, err)
	}
	prog, args, err = p.command(&v1.Container{Image: HeraldImageName, Command: []string{"/herald", "speaker"}, Args: []string{"--node=$(NODE)"}}, env)
	if err != nil || prog != "/bin/herald" || strings.Join(args, " ") != "speaker --node=node2" {
		t.Errorf("herald with command: %q %q %v", prog, args, err)
	}
	_, args, err = p.command(&v1.Container{Image: "herald:dev", Args: []string{"controller"}}, env)
	if err != nil || strings.Join(args, " ") != "controller" {
		t.Errorf("herald with args: %q %v", args, err)
	}
	_, _, err = p.command(&v1.Container{Image: HeraldImageName, Command: []string{"sh", "-c", "x"}}, env)
	if ce, ok := err.(*containerError); !ok || ce.Reason != ReasonCreateContainerError {
		t.Errorf("herald image with sh: %v", err)
	}
	_, _, err = p.command(&v1.Container{Image: "nginx:1.27"}, env)
	ce, ok := err.(*containerError)
	if !ok || ce.Reason != ReasonErrImagePull || !strings.Contains(ce.Message, `"nginx:1.27"`) || !strings.Contains(ce.Message, "registry.k8s.io/echoserver:1.4") {
		t.Errorf("unknown image: %v", err)
	}
}

type fakeGetter struct {
	cms     map[string]*v1.ConfigMap
	secrets map[string]*v1.Secret
}

func (f fakeGetter) ConfigMap(_ context.Context, _, name string) (*v1.ConfigMap, error) {
	if cm, ok := f.cms[name]; ok {
		return cm, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, name)
}

func (f fakeGetter) Secret(_ context.Context, _, name string) (*v1.Secret, error) {
	if s, ok := f.secrets[name]; ok {
		return s, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, name)
}

func TestContainerEnv(t *testing.T) {
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "sp-1", Namespace: "herald-system", UID: "u1", Labels: map[string]string{"app": "speaker"}},
		Spec:       v1.PodSpec{NodeName: "node1", ServiceAccountName: "speaker"},
	}
	field := func(p string) *v1.EnvVarSource {
		return &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: p}}
	}
	c := &v1.Container{
		EnvFrom: []v1.EnvFromSource{{Prefix: "CM_", ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}}}},
		Env: []v1.EnvVar{
			{Name: "NODE", ValueFrom: field("spec.nodeName")},
			{Name: "POD_IP", ValueFrom: field("status.podIP")},
			{Name: "HOST_IP", ValueFrom: field("status.hostIP")},
			{Name: "NAME", ValueFrom: field("metadata.name")},
			{Name: "NS", ValueFrom: field("metadata.namespace")},
			{Name: "APP", ValueFrom: field("metadata.labels['app']")},
			{Name: "SA", ValueFrom: field("spec.serviceAccountName")},
			{Name: "BIND", Value: "$(POD_IP):7946"},
			{Name: "KEY", ValueFrom: &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "ml"}, Key: "secretkey"}}},
			{Name: "CPUS", ValueFrom: &v1.EnvVarSource{ResourceFieldRef: &v1.ResourceFieldSelector{Resource: "limits.cpu"}}},
			{Name: "MEM_MI", ValueFrom: &v1.EnvVarSource{ResourceFieldRef: &v1.ResourceFieldSelector{Resource: "requests.memory", Divisor: resource.MustParse("1Mi")}}},
		},
		Resources: v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceMemory: resource.MustParse("64Mi")}},
	}
	in := envInput{
		pod: pod, ips: podAddrs{pod: []string{"198.18.1.2"}, host: []string{"192.0.2.11"}},
		nodeResources: v1.ResourceList{v1.ResourceCPU: resource.MustParse("2")},
		serviceEnv:    map[string]string{"KUBERNETES_SERVICE_HOST": "198.19.0.1"},
		getter: fakeGetter{
			cms:     map[string]*v1.ConfigMap{"cfg": {Data: map[string]string{"LEVEL": "debug"}}},
			secrets: map[string]*v1.Secret{"ml": {Data: map[string][]byte{"secretkey": []byte("s3cr3t")}}},
		},
	}
	env, err := containerEnv(context.Background(), in, c)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"PATH": DefaultPath, "HOSTNAME": "sp-1", "KUBERNETES_SERVICE_HOST": "198.19.0.1", "CM_LEVEL": "debug",
		"NODE": "node1", "POD_IP": "198.18.1.2", "HOST_IP": "192.0.2.11", "NAME": "sp-1", "NS": "herald-system",
		"APP": "speaker", "SA": "speaker", "BIND": "198.18.1.2:7946", "KEY": "s3cr3t", "CPUS": "2", "MEM_MI": "64",
	}
	for k, v := range want {
		if env.vals[k] != v {
			t.Errorf("%s = %q, want %q", k, env.vals[k], v)
		}
	}
	if len(env.list()) != len(want) {
		t.Errorf("unexpected variables: %v", env.list())
	}

	// A missing ConfigMap is a CreateContainerConfigError unless optional.
	c2 := &v1.Container{Env: []v1.EnvVar{{Name: "X", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "nope"}, Key: "k"}}}}}
	_, err = containerEnv(context.Background(), in, c2)
	if ce, ok := err.(*containerError); !ok || ce.Reason != ReasonCreateContainerConfigError {
		t.Errorf("missing configmap: %v", err)
	}
	opt := true
	c2.Env[0].ValueFrom.ConfigMapKeyRef.Optional = &opt
	if _, err := containerEnv(context.Background(), in, c2); err != nil {
		t.Errorf("optional missing configmap: %v", err)
	}
	c3 := &v1.Container{Env: []v1.EnvVar{{Name: "X", ValueFrom: field("spec.nope")}}}
	if _, err := containerEnv(context.Background(), in, c3); err == nil {
		t.Error("an unknown field path was accepted")
	}
}

func running() v1.ContainerStatus {
	return v1.ContainerStatus{State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}, Ready: true}
}

func exited(code int32) v1.ContainerStatus {
	return v1.ContainerStatus{State: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: code}}}
}

func TestPodPhase(t *testing.T) {
	pod := func(policy v1.RestartPolicy, n int) *v1.Pod {
		p := &v1.Pod{Spec: v1.PodSpec{RestartPolicy: policy}}
		for range n {
			p.Spec.Containers = append(p.Spec.Containers, v1.Container{})
		}
		return p
	}
	waiting := v1.ContainerStatus{State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: ReasonErrImagePull}}}
	backoff := v1.ContainerStatus{
		State:                v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: ReasonCrashLoopBackOff}},
		LastTerminationState: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: 1}},
	}
	for _, tc := range []struct {
		name        string
		pod         *v1.Pod
		cs          []v1.ContainerStatus
		terminating bool
		want        v1.PodPhase
	}{
		{"no statuses yet", pod(v1.RestartPolicyAlways, 1), nil, false, v1.PodPending},
		{"running", pod(v1.RestartPolicyAlways, 2), []v1.ContainerStatus{running(), running()}, false, v1.PodRunning},
		{"one waiting", pod(v1.RestartPolicyAlways, 2), []v1.ContainerStatus{running(), waiting}, false, v1.PodPending},
		{"crash loop", pod(v1.RestartPolicyAlways, 1), []v1.ContainerStatus{backoff}, false, v1.PodRunning},
		{"never, done", pod(v1.RestartPolicyNever, 2), []v1.ContainerStatus{exited(0), exited(0)}, false, v1.PodSucceeded},
		{"never, failed", pod(v1.RestartPolicyNever, 2), []v1.ContainerStatus{exited(0), exited(2)}, false, v1.PodFailed},
		{"never, one left", pod(v1.RestartPolicyNever, 2), []v1.ContainerStatus{exited(1), running()}, false, v1.PodRunning},
		{"onfailure, done", pod(v1.RestartPolicyOnFailure, 1), []v1.ContainerStatus{exited(0)}, false, v1.PodSucceeded},
		{"deleted, killed", pod(v1.RestartPolicyAlways, 1), []v1.ContainerStatus{exited(143)}, true, v1.PodFailed},
		{"deleted, clean exit", pod(v1.RestartPolicyAlways, 1), []v1.ContainerStatus{exited(0)}, true, v1.PodSucceeded},
		{"deleted, never started", pod(v1.RestartPolicyAlways, 1), []v1.ContainerStatus{waiting}, true, v1.PodPending},
	} {
		got := podPhase(tc.pod, statusInput{containers: tc.cs, terminating: tc.terminating})
		if got != tc.want {
			t.Errorf("%s: phase %s, want %s", tc.name, got, tc.want)
		}
	}
}

func TestPodStatusConditions(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	t1 := metav1.NewTime(t0.Add(time.Minute))
	pod := &v1.Pod{
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "a"}, {Name: "b"}}},
		Status: v1.PodStatus{
			QOSClass: v1.PodQOSBestEffort,
			Conditions: []v1.PodCondition{
				{Type: v1.PodScheduled, Status: v1.ConditionTrue, LastTransitionTime: t0},
				{Type: v1.PodInitialized, Status: v1.ConditionTrue, LastTransitionTime: t0},
				{Type: v1.PodReady, Status: v1.ConditionFalse, LastTransitionTime: t0},
			},
		},
	}
	notReady := running()
	notReady.Name, notReady.Ready = "b", false
	a := running()
	a.Name = "a"
	st := podStatus(pod, statusInput{hostIPs: []string{"192.0.2.11"}, podIP: "198.18.1.2", sandboxReady: true,
		containers: []v1.ContainerStatus{a, notReady}, now: t1})
	get := func(typ v1.PodConditionType) v1.PodCondition {
		for _, c := range st.Conditions {
			if c.Type == typ {
				return c
			}
		}
		t.Fatalf("no %s condition in %+v", typ, st.Conditions)
		return v1.PodCondition{}
	}
	if c := get(v1.PodScheduled); c.LastTransitionTime != t0 {
		t.Errorf("PodScheduled not kept: %+v", c)
	}
	if c := get(v1.PodInitialized); c.Status != v1.ConditionTrue || c.LastTransitionTime != t0 {
		t.Errorf("Initialized: %+v", c)
	}
	if c := get(v1.PodReady); c.Status != v1.ConditionFalse || c.LastTransitionTime != t0 || !strings.Contains(c.Message, "[b]") {
		t.Errorf("Ready: %+v", c)
	}
	if c := get(v1.PodReadyToStartContainers); c.Status != v1.ConditionTrue || c.LastTransitionTime != t1 {
		t.Errorf("PodReadyToStartContainers: %+v", c)
	}
	if st.Phase != v1.PodRunning || st.PodIP != "198.18.1.2" || len(st.PodIPs) != 1 || st.HostIP != "192.0.2.11" || st.QOSClass != v1.PodQOSBestEffort {
		t.Errorf("status: %+v", st)
	}

	// All ready: Ready turns True with a new transition time.
	pod.Status = st
	notReady.Ready = true
	st2 := podStatus(pod, statusInput{hostIPs: []string{"192.0.2.11"}, podIP: "198.18.1.2", sandboxReady: true,
		containers: []v1.ContainerStatus{a, notReady}, now: metav1.NewTime(t1.Add(time.Minute))})
	pod.Status = st2
	st = st2
	if c := get(v1.PodReady); c.Status != v1.ConditionTrue || c.LastTransitionTime == t0 {
		t.Errorf("Ready after all containers are: %+v", c)
	}
	if !sameStatus(&st2, &pod.Status) {
		t.Error("sameStatus is false for equal statuses")
	}

	// Dual-stack: both families, IPv4 first, and hostIP the first.
	ds := podStatus(pod, statusInput{hostIPs: []string{"192.0.2.11", "2001:db8::11"}, podIP: "198.18.1.2", podIPv6: "2001:db8:1:1::2",
		containers: []v1.ContainerStatus{a, notReady}, now: t1})
	if ds.HostIP != "192.0.2.11" || fmt.Sprint(ds.HostIPs) != "[{192.0.2.11} {2001:db8::11}]" ||
		ds.PodIP != "198.18.1.2" || fmt.Sprint(ds.PodIPs) != "[{198.18.1.2} {2001:db8:1:1::2}]" {
		t.Errorf("dual-stack status: hostIP %s %v, podIP %s %v", ds.HostIP, ds.HostIPs, ds.PodIP, ds.PodIPs)
	}

	// A terminal phase stays.
	pod.Status.Phase = v1.PodSucceeded
	st3 := podStatus(pod, statusInput{containers: []v1.ContainerStatus{a, notReady}, now: t1})
	if st3.Phase != v1.PodSucceeded {
		t.Errorf("left a terminal phase: %s", st3.Phase)
	}
}

func TestHeartbeatRetry(t *testing.T) {
	for _, c := range []struct {
		failures int
		interval time.Duration
		want     time.Duration
	}{
		{0, 10 * time.Second, 10 * time.Second},
		{1, 10 * time.Second, 200 * time.Millisecond},
		{2, 10 * time.Second, 400 * time.Millisecond},
		{5, 10 * time.Second, 3200 * time.Millisecond},
		{6, 10 * time.Second, 6400 * time.Millisecond},
		{7, 10 * time.Second, 7 * time.Second},
		{100, 10 * time.Second, 7 * time.Second},
		{3, time.Second, 800 * time.Millisecond},
		{4, time.Second, time.Second},
	} {
		if got := heartbeatRetry(c.failures, c.interval); got != c.want {
			t.Errorf("heartbeatRetry(%d, %s) = %s, want %s", c.failures, c.interval, got, c.want)
		}
	}
}
