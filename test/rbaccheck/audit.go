// Package rbaccheck compares the Kubernetes API calls a component really made
// with the RBAC rules it is deployed with. It reports the calls no rule allows
// (the component would fail in a cluster) and the permissions no call used
// (the deploy grants more than the component needs).
//
// Calls come from the kube-apiserver audit log: run the API server with
// AuditPolicy as its --audit-policy-file and read --audit-log-path with
// ReadAuditLog. Rules come from the rendered manifests (kubectl kustomize) via
// ParseManifests.
package rbaccheck

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"sort"
	"strings"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
)

// AuditPolicy is a kube-apiserver audit policy that records every request at
// level Metadata (who, verb, resource, namespace, name, response code) and
// skips the RequestReceived stage, which carries no response code. Bodies are
// not needed to check RBAC, and leaving them out keeps the log small.
const AuditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages:
  - RequestReceived
rules:
  - level: Metadata
`

// Call is one API request as the authorizer saw it. For resource requests
// Resource is set (Subresource when the request targets one, such as
// "status"); for other requests (discovery, /version) Path is set instead.
type Call struct {
	// User is the authenticated user name, for a service account
	// "system:serviceaccount:<namespace>:<name>".
	User string
	// Verb is the RBAC verb: get, list, watch, create, update, patch,
	// delete, deletecollection, or the lower-case HTTP method for
	// non-resource requests.
	Verb        string
	APIGroup    string
	Resource    string
	Subresource string
	// Namespace is empty for cluster-scoped resources and for requests
	// across all namespaces.
	Namespace string
	Name      string
	// Path is the URL path of a non-resource request.
	Path string
	// Code is the HTTP status code of the response; 0 when the log holds
	// no response (the API server stopped before answering).
	Code int32
}

// IsResource reports whether the call targets an API resource rather than a
// non-resource URL.
func (c Call) IsResource() bool { return c.Resource != "" }

// String renders the call the way kubectl auth can-i would name it.
func (c Call) String() string {
	if !c.IsResource() {
		return fmt.Sprintf("%s %s", c.Verb, c.Path)
	}
	var b strings.Builder
	b.WriteString(c.Verb)
	b.WriteByte(' ')
	b.WriteString(qualifiedResource(c.APIGroup, c.Resource, c.Subresource))
	if c.Name != "" {
		b.WriteString("/" + c.Name)
	}
	if c.Namespace != "" {
		b.WriteString(" -n " + c.Namespace)
	}
	if c.Code != 0 {
		fmt.Fprintf(&b, " (HTTP %d)", c.Code)
	}
	return b.String()
}

func qualifiedResource(group, resource, subresource string) string {
	r := resource
	if group != "" {
		r += "." + group
	}
	if subresource != "" {
		r += "/" + subresource
	}
	return r
}

// ReadAuditLog reads a kube-apiserver JSON audit log (one audit.k8s.io/v1
// Event per line) and returns one Call per request, in the order the requests
// were first logged. A request logged at several stages (a watch is logged
// when its response starts and again when it ends) counts once, with the
// response code of its latest stage.
func ReadAuditLog(path string) ([]Call, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("opening audit log: %w", err)
	}
	defer f.Close()
	calls, err := ParseAuditLog(f)
	if err != nil {
		return nil, fmt.Errorf("reading audit log %s: %w", path, err)
	}
	return calls, nil
}

// ParseAuditLog is ReadAuditLog on a stream.
func ParseAuditLog(r io.Reader) ([]Call, error) {
	sc := bufio.NewScanner(r)
	// Metadata-level events are small, but a long request URI or a large
	// annotation set must not abort the read.
	sc.Buffer(make([]byte, 0, 64*1024), 16*1024*1024)
	index := map[string]int{}
	var calls []Call
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		var ev auditv1.Event
		if err := json.Unmarshal([]byte(text), &ev); err != nil {
			return nil, fmt.Errorf("line %d: decoding audit event: %w", line, err)
		}
		if ev.Stage == auditv1.StageRequestReceived {
			continue
		}
		c, err := callFromEvent(&ev)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		id := string(ev.AuditID)
		if id == "" {
			return nil, fmt.Errorf("line %d: audit event without auditID", line)
		}
		if i, ok := index[id]; ok {
			calls[i].Code = c.Code
			continue
		}
		index[id] = len(calls)
		calls = append(calls, c)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return calls, nil
}

func callFromEvent(ev *auditv1.Event) (Call, error) {
	if ev.Verb == "" {
		return Call{}, errors.New("audit event without verb")
	}
	c := Call{User: ev.User.Username, Verb: ev.Verb}
	if ev.ImpersonatedUser != nil {
		// The authorizer checks the impersonated user's permissions.
		c.User = ev.ImpersonatedUser.Username
	}
	if ev.ResponseStatus != nil {
		c.Code = ev.ResponseStatus.Code
	}
	if ref := ev.ObjectRef; ref != nil && ref.Resource != "" {
		c.APIGroup = ref.APIGroup
		c.Resource = ref.Resource
		c.Subresource = ref.Subresource
		c.Namespace = ref.Namespace
		c.Name = ref.Name
		return c, nil
	}
	u, err := url.ParseRequestURI(ev.RequestURI)
	if err != nil {
		return Call{}, fmt.Errorf("parsing request URI %q: %w", ev.RequestURI, err)
	}
	c.Path = u.Path
	return c, nil
}

// Users returns the distinct user names in calls, sorted.
func Users(calls []Call) []string {
	seen := map[string]bool{}
	var out []string
	for _, c := range calls {
		if !seen[c.User] {
			seen[c.User] = true
			out = append(out, c.User)
		}
	}
	sort.Strings(out)
	return out
}
