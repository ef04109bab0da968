package kubelet

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// NetnsAnnotation on the Node names the node's network namespace, so
// tools can find it from the API.
const NetnsAnnotation = "lab.herald.io/netns"

// NodeLeaseNamespace holds the nodes' heartbeat Leases.
const NodeLeaseNamespace = "kube-node-lease"

// capacity is what the node offers: the machine's CPUs and memory (all
// lab nodes share them) and MaxPods pods.
func (k *Kubelet) capacity() v1.ResourceList {
	mem := memTotal()
	return v1.ResourceList{
		v1.ResourceCPU:    *resource.NewQuantity(int64(runtime.NumCPU()), resource.DecimalSI),
		v1.ResourceMemory: *resource.NewQuantity(mem, resource.BinarySI),
		v1.ResourcePods:   *resource.NewQuantity(int64(k.cfg.MaxPods), resource.DecimalSI),
	}
}

func (k *Kubelet) allocatable() v1.ResourceList { return k.capacity() }

// memTotal reads MemTotal from /proc/meminfo, in bytes (1 GiB if it
// cannot).
func memTotal() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 1 << 30
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) >= 2 && fs[0] == "MemTotal:" {
			if kb, err := strconv.ParseInt(fs[1], 10, 64); err == nil {
				return kb * 1024
			}
		}
	}
	return 1 << 30
}

// nodeObject is the Node the kubelet registers.
func (k *Kubelet) nodeObject() *v1.Node {
	labels := map[string]string{
		v1.LabelHostname:          k.cfg.NodeName,
		v1.LabelOSStable:          "linux",
		v1.LabelArchStable:        runtime.GOARCH,
		"beta.kubernetes.io/os":   "linux",
		"beta.kubernetes.io/arch": runtime.GOARCH,
	}
	if k.cfg.NodeZone != "" {
		labels[v1.LabelTopologyZone] = k.cfg.NodeZone
	}
	return &v1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        k.cfg.NodeName,
			Labels:      labels,
			Annotations: map[string]string{NetnsAnnotation: k.cfg.NodeNetns},
		},
		Spec: v1.NodeSpec{
			PodCIDR:  k.cfg.PodCIDR.String(),
			PodCIDRs: k.podCIDRs(),
		},
	}
}

// podCIDRs and nodeIPs are the node's, IPv4 first.
func (k *Kubelet) podCIDRs() []string {
	out := []string{k.cfg.PodCIDR.String()}
	if k.cfg.dualStack() {
		out = append(out, k.cfg.PodCIDRv6.String())
	}
	return out
}

func (k *Kubelet) nodeIPs() []string {
	out := []string{k.cfg.NodeIP.String()}
	if k.cfg.dualStack() {
		out = append(out, k.cfg.NodeIPv6.String())
	}
	return out
}

// registerNode creates the Node, or takes over an existing one with the
// same name (a restarted kubelet), retrying while the API server is not
// reachable. It then reports the node's status once.
func (k *Kubelet) registerNode(ctx context.Context) error {
	want := k.nodeObject()
	for {
		n, err := k.client.CoreV1().Nodes().Create(ctx, want, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			n, err = k.client.CoreV1().Nodes().Get(ctx, want.Name, metav1.GetOptions{})
			if err == nil && len(n.Spec.PodCIDRs) > 0 && strings.Join(n.Spec.PodCIDRs, ",") != strings.Join(want.Spec.PodCIDRs, ",") {
				return fmt.Errorf("kubelet: Node %s exists with podCIDRs %v, the lab's are %v (they cannot change): delete the Node", n.Name, n.Spec.PodCIDRs, want.Spec.PodCIDRs)
			}
			if err == nil {
				patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
					"labels": want.Labels, "annotations": want.Annotations,
				}})
				n, err = k.client.CoreV1().Nodes().Patch(ctx, want.Name, types.MergePatchType, patch, metav1.PatchOptions{})
			}
		}
		if err == nil {
			k.nodeUID = n.UID
			if err = k.updateNodeStatus(ctx); err == nil {
				return nil
			}
		}
		k.logf("registering node: %v (retrying)", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("kubelet: registering node %s: %w (last error: %v)", k.cfg.NodeName, ctx.Err(), err)
		case <-time.After(2 * time.Second):
		}
	}
}

// nodeInfo describes the machine and the kubelet.
func (k *Kubelet) nodeInfo() v1.NodeSystemInfo {
	read := func(path string) string {
		b, _ := os.ReadFile(path)
		return strings.TrimSpace(string(b))
	}
	var uts unix.Utsname
	kernel := ""
	if unix.Uname(&uts) == nil {
		kernel = unix.ByteSliceToString(uts.Release[:])
	}
	osImage := "herald lab"
	for _, line := range strings.Split(read("/etc/os-release"), "\n") {
		if v, ok := strings.CutPrefix(line, "PRETTY_NAME="); ok {
			osImage = "herald lab on " + strings.Trim(v, `"`)
		}
	}
	return v1.NodeSystemInfo{
		MachineID:               read("/etc/machine-id"),
		SystemUUID:              k.cfg.NodeName,
		BootID:                  read("/proc/sys/kernel/random/boot_id"),
		KernelVersion:           kernel,
		OSImage:                 osImage,
		ContainerRuntimeVersion: "lab://" + k.cfg.KubeletVersion,
		KubeletVersion:          k.cfg.KubeletVersion,
		OperatingSystem:         "linux",
		Architecture:            runtime.GOARCH,
	}
}

// updateNodeStatus reports the node's conditions (Ready, no pressure),
// addresses, capacity and system info; every call refreshes the
// conditions' heartbeat time.
func (k *Kubelet) updateNodeStatus(ctx context.Context) error {
	n, err := k.client.CoreV1().Nodes().Get(ctx, k.cfg.NodeName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	t := now()
	cond := func(typ v1.NodeConditionType, status v1.ConditionStatus, reason, msg string) v1.NodeCondition {
		c := v1.NodeCondition{Type: typ, Status: status, Reason: reason, Message: msg, LastHeartbeatTime: t, LastTransitionTime: t}
		for _, o := range n.Status.Conditions {
			if o.Type == typ && o.Status == status {
				c.LastTransitionTime = o.LastTransitionTime
			}
		}
		return c
	}
	st := v1.NodeStatus{
		Capacity:    k.capacity(),
		Allocatable: k.allocatable(),
		Conditions: []v1.NodeCondition{
			cond(v1.NodeMemoryPressure, v1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
			cond(v1.NodeDiskPressure, v1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
			cond(v1.NodePIDPressure, v1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
			cond(v1.NodeReady, v1.ConditionTrue, "KubeletReady", "lab kubelet is posting ready status"),
		},
		Addresses: k.nodeAddresses(),
		NodeInfo:  k.nodeInfo(),
	}
	if k.servesAPI() {
		// Where the API server reaches the kubelet API.
		st.DaemonEndpoints.KubeletEndpoint.Port = int32(k.cfg.Port)
	}
	patch, err := json.Marshal(map[string]any{"status": st})
	if err != nil {
		return err
	}
	_, err = k.client.CoreV1().Nodes().Patch(ctx, k.cfg.NodeName, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	return err
}

// nodeAddresses are the InternalIPs, IPv4 first, then the host name.
func (k *Kubelet) nodeAddresses() []v1.NodeAddress {
	var out []v1.NodeAddress
	for _, ip := range k.nodeIPs() {
		out = append(out, v1.NodeAddress{Type: v1.NodeInternalIP, Address: ip})
	}
	return append(out, v1.NodeAddress{Type: v1.NodeHostName, Address: k.cfg.NodeName})
}

// renewLease creates or renews the node's Lease, which is what the node
// lifecycle controller watches to tell a live node.
func (k *Kubelet) renewLease(ctx context.Context) error {
	leases := k.client.CoordinationV1().Leases(NodeLeaseNamespace)
	renew := metav1.NewMicroTime(time.Now())
	l, err := leases.Get(ctx, k.cfg.NodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		holder, dur := k.cfg.NodeName, int32(LeaseDuration)
		l = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: k.cfg.NodeName, Namespace: NodeLeaseNamespace},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &dur, RenewTime: &renew},
		}
		if k.nodeUID != "" {
			l.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: k.cfg.NodeName, UID: k.nodeUID}}
		}
		_, err = leases.Create(ctx, l, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	l.Spec.RenewTime = &renew
	_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	return err
}

// heartbeat renews the Lease and the node status every interval until
// ctx ends. After a failure it tries again sooner (heartbeatRetry), as
// the real kubelet's lease controller does: once the API server is back
// from an outage, kube-controller-manager marks a node NotReady at its
// first look unless the node's Lease moved, so a kubelet that waited a
// whole interval would lose that race after any outage longer than
// --node-monitor-grace-period.
func (k *Kubelet) heartbeat(ctx context.Context) {
	failures := 0
	for {
		err := k.renewLease(ctx)
		if err != nil && ctx.Err() == nil {
			k.logf("renewing the lease: %v", err)
		}
		if err == nil {
			if err = k.updateNodeStatus(ctx); err != nil && ctx.Err() == nil {
				k.logf("updating node status: %v", err)
			}
		}
		if err == nil {
			failures = 0
		} else {
			failures++
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(heartbeatRetry(failures, k.cfg.HeartbeatInterval)):
		}
	}
}

// heartbeatRetry is the wait before the next heartbeat after failures
// failed ones in a row: the interval after a success, else 200 ms
// doubling up to 7 s (the real kubelet's lease retry), never more than
// the interval.
func heartbeatRetry(failures int, interval time.Duration) time.Duration {
	if failures == 0 {
		return interval
	}
	d := 200 * time.Millisecond
	for i := 1; i < failures && d < 7*time.Second; i++ {
		d *= 2
	}
	return min(d, 7*time.Second, interval)
}
