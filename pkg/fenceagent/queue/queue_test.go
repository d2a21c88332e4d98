package queue

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

func TestOnChange(t *testing.T) {
	var got []string
	h := OnChange(func(o metav1.Object) { got = append(got, o.GetName()+"@"+o.GetResourceVersion()) })
	v1 := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a", ResourceVersion: "1"}}
	v2 := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a", ResourceVersion: "2"}}
	h.OnAdd(v1, false)
	h.OnUpdate(v1, v1) // a resync
	h.OnUpdate(v1, v2)
	h.OnDelete(cache.DeletedFinalStateUnknown{Key: "a", Obj: v2})
	if want := "[a@1 a@2 a@2]"; fmt.Sprint(got) != want {
		t.Errorf("calls %s, want %s", fmt.Sprint(got), want)
	}
}
