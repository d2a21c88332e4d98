package rbaccheck

import (
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1"
)

func metaName(n string) v1.ObjectMeta { return v1.ObjectMeta{Name: n} }

func TestReadAuditLog(t *testing.T) {
	calls, err := ReadAuditLog(filepath.Join("testdata", "audit.log"))
	if err != nil {
		t.Fatalf("ReadAuditLog: %v", err)
	}
	want := []Call{
		{User: attacherSA, Verb: "list", APIGroup: "storage.k8s.io", Resource: "volumeattachments", Code: 200},
		{User: attacherSA, Verb: "watch", APIGroup: "storage.k8s.io", Resource: "volumeattachments", Code: 200},
		{User: attacherSA, Verb: "patch", APIGroup: "storage.k8s.io", Resource: "volumeattachments", Subresource: "status", Name: "csi-0a1b", Code: 200},
		{User: attacherSA, Verb: "list", Resource: "pods", Code: 403},
		{User: attacherSA, Verb: "get", Path: "/apis/storage.k8s.io/v1", Code: 200},
		{User: "system:serviceaccount:fenceline-system:fenceline-controller", Verb: "get", APIGroup: "coordination.k8s.io", Resource: "leases", Namespace: "fenceline-system", Name: "fenceline-controller", Code: 404},
	}
	if len(calls) != len(want) {
		t.Fatalf("got %d calls, want %d:\n%v", len(calls), len(want), calls)
	}
	for i := range want {
		if calls[i] != want[i] {
			t.Errorf("call %d = %+v, want %+v", i, calls[i], want[i])
		}
	}
	if got, want := Users(calls), []string{attacherSA, "system:serviceaccount:fenceline-system:fenceline-controller"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("Users = %q, want %q", got, want)
	}
}

func TestParseAuditLogErrors(t *testing.T) {
	tests := []struct {
		name    string
		log     string
		wantErr string
	}{
		{"not JSON", "{\"kind\":\"Event\"\n", "line 1: decoding audit event"},
		{"no audit ID", `{"kind":"Event","stage":"ResponseComplete","verb":"get","requestURI":"/version"}` + "\n", "line 1: audit event without auditID"},
		{"no verb", "\n" + `{"kind":"Event","auditID":"a","stage":"ResponseComplete","requestURI":"/version"}`, "line 2: audit event without verb"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseAuditLog(strings.NewReader(tc.log))
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error = %v, want it to contain %q", err, tc.wantErr)
			}
		})
	}
}

func TestReadAuditLogMissingFile(t *testing.T) {
	_, err := ReadAuditLog(filepath.Join(t.TempDir(), "missing.log"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("error = %v, want a not-exist error", err)
	}
}
