package kubelet

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

func TestRequestAttributes(t *testing.T) {
	u := &user.DefaultInfo{Name: "kube-apiserver-kubelet-client"}
	for _, tc := range []struct {
		method, path string
		verb         string
		subresources []string
	}{
		{"GET", "/healthz", "get", []string{"healthz", "proxy"}},
		{"GET", "/healthz/ping", "get", []string{"healthz", "proxy"}},
		{"GET", "/healthzx", "get", []string{"proxy"}},
		{"POST", "/exec/default/web/app", "create", []string{"proxy"}},
		{"GET", "/exec/default/web/app", "get", []string{"proxy"}},
		{"GET", "/containerLogs/default/web/app", "get", []string{"proxy"}},
		{"POST", "/portForward/default/web", "create", []string{"proxy"}},
		{"POST", "/run/default/web/app", "create", []string{"proxy"}},
		{"GET", "/pods", "get", []string{"pods", "proxy"}},
		{"GET", "/stats/summary", "get", []string{"stats"}},
		{"GET", "/metrics", "get", []string{"metrics"}},
		{"GET", "/logs/syslog", "get", []string{"log"}},
		{"PUT", "/configz", "update", []string{"configz", "proxy"}},
		{"DELETE", "/x", "delete", []string{"proxy"}},
		{"OPTIONS", "/x", "", []string{"proxy"}},
	} {
		r := httptest.NewRequest(tc.method, tc.path, nil)
		attrs := requestAttributes("node1", u, r)
		var subs []string
		for _, a := range attrs {
			subs = append(subs, a.GetSubresource())
			if a.GetVerb() != tc.verb || a.GetResource() != "nodes" || a.GetName() != "node1" || a.GetAPIVersion() != "v1" ||
				a.GetAPIGroup() != "" || a.GetNamespace() != "" || !a.IsResourceRequest() || a.GetUser() != u || a.GetPath() != tc.path {
				t.Errorf("%s %s: %+v", tc.method, tc.path, a)
			}
		}
		if !slices.Equal(subs, tc.subresources) {
			t.Errorf("%s %s: subresources %v, want %v", tc.method, tc.path, subs, tc.subresources)
		}
	}
}

func TestAuthWrap(t *testing.T) {
	// The fake authenticator knows users by a header; the fake
	// authorizer allows "proxy" to admin and "healthz" to monitor.
	authn := authenticator.RequestFunc(func(r *http.Request) (*authenticator.Response, bool, error) {
		name := r.Header.Get("X-User")
		if name == "" {
			return nil, false, nil
		}
		return &authenticator.Response{User: &user.DefaultInfo{Name: name}}, true, nil
	})
	authz := authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		switch {
		case a.GetUser().GetName() == "admin" && a.GetSubresource() == "proxy",
			a.GetUser().GetName() == "monitor" && a.GetSubresource() == "healthz":
			return authorizer.DecisionAllow, "", nil
		}
		return authorizer.DecisionNoOpinion, "", nil
	})
	h := (&apiAuth{authn: authn, authz: authz, node: "node1"}).wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("through"))
	}))
	for _, tc := range []struct {
		user, method, path string
		status             int
		body               string
	}{
		{"", "GET", "/healthz", 401, "Unauthorized"},
		{"admin", "GET", "/healthz", 200, "through"},
		{"monitor", "GET", "/healthz", 200, "through"},
		{"admin", "POST", "/exec/default/web/app", 200, "through"},
		{"monitor", "POST", "/exec/default/web/app", 403, "Forbidden (user=monitor, verb=create, resource=nodes, subresource(s)=[proxy])"},
		{"nobody", "GET", "/healthz", 403, "Forbidden (user=nobody, verb=get, resource=nodes, subresource(s)=[healthz proxy])"},
	} {
		r := httptest.NewRequest(tc.method, tc.path, nil)
		if tc.user != "" {
			r.Header.Set("X-User", tc.user)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != tc.status || strings.TrimSpace(w.Body.String()) != tc.body {
			t.Errorf("%s %s %s: %d %q, want %d %q", tc.user, tc.method, tc.path, w.Code, w.Body.String(), tc.status, tc.body)
		}
	}
}
