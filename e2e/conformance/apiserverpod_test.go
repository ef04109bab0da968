package conformance

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes/fake"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestKeepAPIServerPod deletes the stand-in as upstream's restart test
// does (by label, grace 0) and finds it back, running and ready, as that
// test and the suite's start wait for.
func TestKeepAPIServerPod(t *testing.T) {
	cs := fake.NewClientset()
	ctx, cancel := context.WithCancel(context.Background())
	var log syncBuffer
	done, err := KeepAPIServerPod(ctx, cs, "kube-apiserver-hlab", "v1.34.10", 10*time.Millisecond, &log)
	if err != nil {
		t.Fatal(err)
	}
	pods := cs.CoreV1().Pods(metav1.NamespaceSystem)
	sel := metav1.ListOptions{LabelSelector: labels.SelectorFromSet(map[string]string{"component": "kube-apiserver"}).String()}
	running := func() *v1.Pod {
		list, err := pods.List(ctx, sel)
		if err != nil || len(list.Items) != 1 {
			return nil
		}
		p := list.Items[0]
		ready := false
		for _, c := range p.Status.Conditions {
			ready = ready || (c.Type == v1.PodReady && c.Status == v1.ConditionTrue)
		}
		if p.Status.Phase != v1.PodRunning || !ready || p.Spec.NodeName != "" || p.Spec.SchedulerName == v1.DefaultSchedulerName {
			t.Fatalf("the stand-in: phase %s, ready %v, node %q, scheduler %q", p.Status.Phase, ready, p.Spec.NodeName, p.Spec.SchedulerName)
		}
		return &p
	}
	if running() == nil {
		t.Fatal("no stand-in pod after KeepAPIServerPod returned")
	}
	for round := 0; round < 2; round++ {
		zero := int64(0)
		if err := pods.Delete(ctx, "kube-apiserver-hlab", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for running() == nil {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the stand-in was not made again", round)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	cancel()
	<-done
	if n := strings.Count(log.String(), "made again"); n != 2 {
		t.Errorf("%d deletions logged, want 2:\n%s", n, log.String())
	}
}
