package main

// The rules axis (tests/bench/README.md, "The rules axis"): what a team
// would write instead of R kiln rules over the kinds App0 … App(K-1): one
// controller per kind, in one process, whose reconcile does what the rules
// on that kind do. Rule i takes the primaries of kind App(i mod K) labelled
// bench.kiln.dev/rule=r<i>, applies their ConfigMap <name>-config (data =
// spec.config, labelled with the rule and its generation) and writes their
// status (observedGeneration, Ready and Reconciled, config<i>). A rule's
// generation is configuration: changing one means restarting the process
// with new flags, as a redeploy would.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
)

const (
	ruleLabel = "bench.kiln.dev/rule"
	genLabel  = "bench.kiln.dev/gen"
)

// AppsGroupVersion is the API group and version of App0 … App9.
var AppsGroupVersion = schema.GroupVersion{Group: "bench.kiln.dev", Version: "v1"}

// kindTag names one of the ten kinds; App[K] is a distinct Go type per kind,
// standing in for the ten types a team would generate.
type kindTag interface{ kind() string }

type (
	k0 struct{}
	k1 struct{}
	k2 struct{}
	k3 struct{}
	k4 struct{}
	k5 struct{}
	k6 struct{}
	k7 struct{}
	k8 struct{}
	k9 struct{}
)

func (k0) kind() string { return "App0" }
func (k1) kind() string { return "App1" }
func (k2) kind() string { return "App2" }
func (k3) kind() string { return "App3" }
func (k4) kind() string { return "App4" }
func (k5) kind() string { return "App5" }
func (k6) kind() string { return "App6" }
func (k7) kind() string { return "App7" }
func (k8) kind() string { return "App8" }
func (k9) kind() string { return "App9" }

// AppStatus is what the rules write: observedGeneration, the conditions and
// one config<i> field per rule (only one rule selects a primary).
type AppStatus struct {
	ObservedGeneration int64
	Conditions         []metav1.Condition
	Fields             map[string]string
}

func (s AppStatus) MarshalJSON() ([]byte, error) {
	m := map[string]any{}
	for k, v := range s.Fields {
		m[k] = v
	}
	if s.ObservedGeneration != 0 {
		m["observedGeneration"] = s.ObservedGeneration
	}
	if len(s.Conditions) > 0 {
		m["conditions"] = s.Conditions
	}
	return json.Marshal(m)
}

func (s *AppStatus) UnmarshalJSON(b []byte) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	*s = AppStatus{}
	for k, v := range m {
		var err error
		switch {
		case k == "observedGeneration":
			err = json.Unmarshal(v, &s.ObservedGeneration)
		case k == "conditions":
			err = json.Unmarshal(v, &s.Conditions)
		case strings.HasPrefix(k, "config") && bytes.HasPrefix(v, []byte(`"`)):
			var f string
			err = json.Unmarshal(v, &f)
			if s.Fields == nil {
				s.Fields = map[string]string{}
			}
			s.Fields[k] = f
		}
		if err != nil {
			return fmt.Errorf("status.%s: %w", k, err)
		}
	}
	return nil
}

// App is a primary of kind K: the WebApp schema under another name.
type App[K kindTag] struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   WebAppSpec `json:"spec,omitempty"`
	Status AppStatus  `json:"status,omitempty"`
}

// AppList is a list of App[K].
type AppList[K kindTag] struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []App[K] `json:"items"`
}

func (in *AppStatus) DeepCopyInto(out *AppStatus) {
	*out = *in
	if in.Conditions != nil {
		out.Conditions = make([]metav1.Condition, len(in.Conditions))
		for i := range in.Conditions {
			in.Conditions[i].DeepCopyInto(&out.Conditions[i])
		}
	}
	if in.Fields != nil {
		out.Fields = make(map[string]string, len(in.Fields))
		for k, v := range in.Fields {
			out.Fields[k] = v
		}
	}
}

func (in *AppStatus) DeepCopy() *AppStatus {
	out := new(AppStatus)
	in.DeepCopyInto(out)
	return out
}

func (in *App[K]) DeepCopyInto(out *App[K]) {
	*out = *in
	in.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	in.Spec.DeepCopyInto(&out.Spec)
	in.Status.DeepCopyInto(&out.Status)
}

func (in *App[K]) DeepCopy() *App[K] {
	out := new(App[K])
	in.DeepCopyInto(out)
	return out
}

func (in *App[K]) DeepCopyObject() runtime.Object {
	return in.DeepCopy()
}

func (in *AppList[K]) DeepCopyObject() runtime.Object {
	out := new(AppList[K])
	*out = *in
	in.ListMeta.DeepCopyInto(&out.ListMeta)
	if in.Items != nil {
		out.Items = make([]App[K], len(in.Items))
		for i := range in.Items {
			in.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
	return out
}

// appsConfig is the rules axis's job, from the flags.
type appsConfig struct {
	Rules        int
	Kinds        int
	Generation   string
	GenerationOf map[int]string
	FieldManager string
	Resync       time.Duration
	Concurrency  int
}

// generation of rule i's children.
func (c *appsConfig) generation(i int) string {
	if g, ok := c.GenerationOf[i]; ok {
		return g
	}
	return c.Generation
}

// parseGenerations reads "r000=e1,r007=e2".
func parseGenerations(s string) (map[int]string, error) {
	out := map[int]string{}
	for _, pair := range strings.Split(s, ",") {
		if pair == "" {
			continue
		}
		name, gen, ok := strings.Cut(pair, "=")
		i, err := strconv.Atoi(strings.TrimPrefix(name, "r"))
		if !ok || err != nil || !strings.HasPrefix(name, "r") {
			return nil, fmt.Errorf("--generation-of: %q is not rNNN=GEN", pair)
		}
		out[i] = gen
	}
	return out, nil
}

// AppReconciler does, for the primaries of kind K, what the rules on K do.
type AppReconciler[K kindTag] struct {
	client.Client
	Config *appsConfig
	// Index is K's place among the kinds (rule i is on kind i mod Kinds).
	Index int
}

// rule is the rule of this kind selecting app, if any.
func (r *AppReconciler[K]) rule(app *App[K]) (int, bool) {
	name, ok := app.Labels[ruleLabel]
	if !ok || !strings.HasPrefix(name, "r") {
		return 0, false
	}
	i, err := strconv.Atoi(name[1:])
	if err != nil || i >= r.Config.Rules || i%r.Config.Kinds != r.Index {
		return 0, false
	}
	return i, true
}

func (r *AppReconciler[K]) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var app App[K]
	if err := r.Get(ctx, req.NamespacedName, &app); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	i, ok := r.rule(&app)
	if !ok {
		return ctrl.Result{}, nil
	}
	rule := fmt.Sprintf("r%03d", i)
	var k K
	owner := metav1ac.OwnerReference().
		WithAPIVersion(AppsGroupVersion.String()).
		WithKind(k.kind()).
		WithName(app.Name).
		WithUID(app.UID).
		WithController(true).
		WithBlockOwnerDeletion(true)
	config := app.Spec.Config
	if config == nil {
		config = map[string]string{}
	}
	configMapName := app.Name + "-config"
	cm := corev1ac.ConfigMap(configMapName, app.Namespace).
		WithLabels(map[string]string{
			managedByLabel: controllerName,
			ruleLabel:      rule,
			genLabel:       r.Config.generation(i),
		}).
		WithOwnerReferences(owner).
		WithData(config)
	if err := r.Apply(ctx, cm, client.FieldOwner(r.Config.FieldManager), client.ForceOwnership); err != nil {
		return ctrl.Result{}, fmt.Errorf("applying ConfigMap %s: %w", configMapName, err)
	}

	status := app.Status.DeepCopy()
	status.ObservedGeneration = app.Generation
	meta.SetStatusCondition(&status.Conditions, metav1.Condition{
		Type: "Ready", Status: metav1.ConditionTrue, Reason: "AllChildrenReady",
		Message: "all children are ready", ObservedGeneration: app.Generation,
	})
	meta.SetStatusCondition(&status.Conditions, metav1.Condition{
		Type: "Reconciled", Status: metav1.ConditionTrue, Reason: "Applied",
		Message: "all children applied", ObservedGeneration: app.Generation,
	})
	if status.Fields == nil {
		status.Fields = map[string]string{}
	}
	status.Fields[fmt.Sprintf("config%03d", i)] = configMapName
	if !equality.Semantic.DeepEqual(app.Status, *status) {
		base := app.DeepCopy()
		app.Status = *status
		if err := r.Status().Patch(ctx, &app, client.MergeFrom(base)); err != nil {
			return ctrl.Result{}, err
		}
	}
	return ctrl.Result{RequeueAfter: r.Config.Resync}, nil
}

// registerKind registers App[K] and its list with the scheme.
func registerKind[K kindTag](scheme *runtime.Scheme) {
	var k K
	scheme.AddKnownTypeWithName(AppsGroupVersion.WithKind(k.kind()), &App[K]{})
	scheme.AddKnownTypeWithName(AppsGroupVersion.WithKind(k.kind()+"List"), &AppList[K]{})
}

// setupKind adds the controller of App[K], the index-th kind.
func setupKind[K kindTag](mgr ctrl.Manager, config *appsConfig, index int) error {
	var k K
	return ctrl.NewControllerManagedBy(mgr).
		Named(strings.ToLower(k.kind())).
		For(&App[K]{}).
		Owns(&corev1.ConfigMap{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: config.Concurrency}).
		Complete(&AppReconciler[K]{Client: mgr.GetClient(), Config: config, Index: index})
}

// appKind is what main needs of one kind.
type appKind struct {
	register func(*runtime.Scheme)
	setup    func(ctrl.Manager, *appsConfig, int) error
}

func kindOf[K kindTag]() appKind {
	return appKind{register: registerKind[K], setup: setupKind[K]}
}

// appKinds are App0 … App9, in order.
var appKinds = []appKind{
	kindOf[k0](), kindOf[k1](), kindOf[k2](), kindOf[k3](), kindOf[k4](),
	kindOf[k5](), kindOf[k6](), kindOf[k7](), kindOf[k8](), kindOf[k9](),
}

// registerApps registers the first `kinds` kinds and the group's options types.
func registerApps(scheme *runtime.Scheme, kinds int) {
	metav1.AddToGroupVersion(scheme, AppsGroupVersion)
	for _, k := range appKinds[:kinds] {
		k.register(scheme)
	}
}

// setupApps adds one controller per kind.
func setupApps(mgr ctrl.Manager, config *appsConfig) error {
	for i, k := range appKinds[:config.Kinds] {
		if err := k.setup(mgr, config, i); err != nil {
			return err
		}
	}
	return nil
}
