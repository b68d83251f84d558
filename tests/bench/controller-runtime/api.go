package main

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

// GroupVersion is the API group and version of WebApp (examples/webapp/crd.yaml).
var GroupVersion = schema.GroupVersion{Group: "demo.kiln.dev", Version: "v1"}

// SchemeBuilder registers WebApp and WebAppList with a scheme.
var SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

func init() {
	SchemeBuilder.Register(&WebApp{}, &WebAppList{})
}

// WebAppSpec is the desired state of a WebApp.
type WebAppSpec struct {
	Image      string            `json:"image"`
	Replicas   int32             `json:"replicas"`
	Port       int32             `json:"port"`
	SecretName string            `json:"secretName"`
	Config     map[string]string `json:"config,omitempty"`
}

// WebAppStatus is the observed state of a WebApp.
type WebAppStatus struct {
	ObservedGeneration int64              `json:"observedGeneration,omitempty"`
	Conditions         []metav1.Condition `json:"conditions,omitempty"`
	URL                string             `json:"url,omitempty"`
	ReadyReplicas      *int32             `json:"readyReplicas,omitempty"`
}

// WebApp is a container image served behind a Service, configured from a
// ConfigMap, with its credentials in a Secret.
type WebApp struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   WebAppSpec   `json:"spec,omitempty"`
	Status WebAppStatus `json:"status,omitempty"`
}

// WebAppList is a list of WebApps.
type WebAppList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []WebApp `json:"items"`
}

// The deep-copy methods below are what controller-gen would generate.

func (in *WebAppSpec) DeepCopyInto(out *WebAppSpec) {
	*out = *in
	if in.Config != nil {
		out.Config = make(map[string]string, len(in.Config))
		for k, v := range in.Config {
			out.Config[k] = v
		}
	}
}

func (in *WebAppStatus) DeepCopyInto(out *WebAppStatus) {
	*out = *in
	if in.Conditions != nil {
		out.Conditions = make([]metav1.Condition, len(in.Conditions))
		for i := range in.Conditions {
			in.Conditions[i].DeepCopyInto(&out.Conditions[i])
		}
	}
	if in.ReadyReplicas != nil {
		out.ReadyReplicas = new(int32)
		*out.ReadyReplicas = *in.ReadyReplicas
	}
}

func (in *WebAppStatus) DeepCopy() *WebAppStatus {
	if in == nil {
		return nil
	}
	out := new(WebAppStatus)
	in.DeepCopyInto(out)
	return out
}

func (in *WebApp) DeepCopyInto(out *WebApp) {
	*out = *in
	out.TypeMeta = in.TypeMeta
	in.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	in.Spec.DeepCopyInto(&out.Spec)
	in.Status.DeepCopyInto(&out.Status)
}

func (in *WebApp) DeepCopy() *WebApp {
	if in == nil {
		return nil
	}
	out := new(WebApp)
	in.DeepCopyInto(out)
	return out
}

func (in *WebApp) DeepCopyObject() runtime.Object {
	return in.DeepCopy()
}

func (in *WebAppList) DeepCopyInto(out *WebAppList) {
	*out = *in
	out.TypeMeta = in.TypeMeta
	in.ListMeta.DeepCopyInto(&out.ListMeta)
	if in.Items != nil {
		out.Items = make([]WebApp, len(in.Items))
		for i := range in.Items {
			in.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
}

func (in *WebAppList) DeepCopy() *WebAppList {
	if in == nil {
		return nil
	}
	out := new(WebAppList)
	in.DeepCopyInto(out)
	return out
}

func (in *WebAppList) DeepCopyObject() runtime.Object {
	return in.DeepCopy()
}
