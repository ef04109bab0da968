package kubelet

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/kubernetes"
)

// apiAuth guards the kubelet API the way a real kubelet started with
// --anonymous-auth=false --authorization-mode=Webhook does: a client is
// authenticated by a certificate of the client CA or by a bearer token
// (a TokenReview), and every request is authorized by a
// SubjectAccessReview against the node (nodes/proxy, nodes/healthz, ...;
// requestAttributes). The reviews go to the API server with the node's
// own credentials, which the Node authorizer allows.
type apiAuth struct {
	authn authenticator.Request
	authz authorizer.Authorizer
	node  string
}

// webhookBackoff is how the reviews are retried: the apiserver library's
// default.
var webhookBackoff = wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}

func newAPIAuth(nodeName, clientCAFile string, client kubernetes.Interface) (*apiAuth, error) {
	caPEM, err := os.ReadFile(clientCAFile)
	if err != nil {
		return nil, fmt.Errorf("kubelet API: client CA: %w", err)
	}
	ca, err := dynamiccertificates.NewStaticCAContent("client-ca", caPEM)
	if err != nil {
		return nil, fmt.Errorf("kubelet API: client CA %s: %w", clientCAFile, err)
	}
	authn, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
		ClientCertificateCAContentProvider: ca,
		TokenAccessReviewClient:            client.AuthenticationV1(),
		TokenAccessReviewTimeout:           10 * time.Second,
		WebhookRetryBackoff:                &webhookBackoff,
		CacheTTL:                           2 * time.Minute, // the kubelet's defaults
	}.New()
	if err != nil {
		return nil, fmt.Errorf("kubelet API: authentication: %w", err)
	}
	authz, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: client.AuthorizationV1(),
		AllowCacheTTL:             5 * time.Minute,
		DenyCacheTTL:              30 * time.Second,
		WebhookRetryBackoff:       &webhookBackoff,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("kubelet API: authorization: %w", err)
	}
	return &apiAuth{authn: authn, authz: authz, node: nodeName}, nil
}

// wrap lets through to next only authenticated, authorized requests.
func (a *apiAuth) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resp, ok, err := a.authn.AuthenticateRequest(r)
		if err != nil || !ok {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		attrs := requestAttributes(a.node, resp.User, r)
		for _, attr := range attrs {
			decision, _, err := a.authz.Authorize(r.Context(), attr)
			if err != nil {
				http.Error(w, fmt.Sprintf("Authorization error (user=%s, verb=%s, resource=nodes, subresource=%s): %v",
					resp.User.GetName(), attr.GetVerb(), attr.GetSubresource(), err), http.StatusInternalServerError)
				return
			}
			if decision == authorizer.DecisionAllow {
				next.ServeHTTP(w, r)
				return
			}
		}
		http.Error(w, forbiddenMessage(resp.User, attrs), http.StatusForbidden)
	})
}

// requestAttributes is what a request to the kubelet API is authorized
// as, in the order they are tried (the first allowed one wins), as the
// real kubelet maps them (pkg/kubelet/server/auth.go, with
// KubeletFineGrainedAuthz on as it is by default since v1.33): resource
// nodes, name the node, the verb from the HTTP method, and a subresource
// from the path. /healthz and /pods may also pass as nodes/proxy, which
// is what every other path (exec, containerLogs, portForward, run, ...)
// needs.
func requestAttributes(nodeName string, u user.Info, r *http.Request) []authorizer.Attributes {
	verb := map[string]string{
		http.MethodGet: "get", http.MethodPost: "create", http.MethodPut: "update",
		http.MethodPatch: "patch", http.MethodDelete: "delete",
	}[r.Method]
	var subresources []string
	switch p := r.URL.Path; {
	case isSubpath(p, "/healthz"):
		subresources = []string{"healthz", "proxy"}
	case isSubpath(p, "/pods"), isSubpath(p, "/runningpods"):
		subresources = []string{"pods", "proxy"}
	case isSubpath(p, "/configz"):
		subresources = []string{"configz", "proxy"}
	case isSubpath(p, "/stats"):
		subresources = []string{"stats"}
	case isSubpath(p, "/metrics"):
		subresources = []string{"metrics"}
	case isSubpath(p, "/logs"):
		subresources = []string{"log"}
	default:
		subresources = []string{"proxy"}
	}
	out := make([]authorizer.Attributes, 0, len(subresources))
	for _, sub := range subresources {
		out = append(out, authorizer.AttributesRecord{
			User:            u,
			Verb:            verb,
			APIVersion:      "v1",
			Resource:        "nodes",
			Subresource:     sub,
			Name:            nodeName,
			ResourceRequest: true,
			Path:            r.URL.Path,
		})
	}
	return out
}

// isSubpath tells whether p is dir or below it.
func isSubpath(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, dir+"/")
}

func forbiddenMessage(u user.Info, attrs []authorizer.Attributes) string {
	subs := make([]string, len(attrs))
	for i, a := range attrs {
		subs[i] = a.GetSubresource()
	}
	return fmt.Sprintf("Forbidden (user=%s, verb=%s, resource=nodes, subresource(s)=[%s])",
		u.GetName(), attrs[0].GetVerb(), strings.Join(subs, " "))
}
