// Package v1alpha1 is Stasis's Kubernetes API, group stasis.dev: actor
// templates, actors and their stored snapshots as resources
// (docs/kubernetes.md). The CRDs under deploy/helm/stasis/crds are generated from
// these types by controller-gen (scripts/gen-kube.sh).
//
// +kubebuilder:object:generate=true
// +groupName=stasis.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the group and version of these resources.
var GroupVersion = schema.GroupVersion{Group: "stasis.dev", Version: "v1alpha1"}

// AddToScheme adds the types of this group to a scheme.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &ActorTemplate{}, &ActorTemplateList{}, &Actor{}, &ActorList{}, &Snapshot{}, &SnapshotList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
