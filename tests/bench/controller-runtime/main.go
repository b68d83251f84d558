// Command controller-runtime-bench is the hand-written controller-runtime
// contender of kiln's benchmark (tests/bench/README.md): what a Go operator
// author would otherwise write to do the job of rules/webapp.yaml.
//
// It reconciles WebApps (demo.kiln.dev/v1) in one namespace into a
// ConfigMap, a Deployment and a Service (server-side apply, forced, owned by
// the WebApp), waits for the Secret the WebApp names, and writes the WebApp's
// status (Ready/Reconciled conditions, observedGeneration, url,
// readyReplicas) only when it changes.
//
// Flags: --namespace, --concurrency, --resync-seconds, --field-manager. The
// kubeconfig comes from KUBECONFIG (controller-runtime also registers its
// usual --kubeconfig flag). With --rules R it does the rules axis's job
// instead (apps.go): one controller per kind of App0 … App(--kinds - 1).
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"go.uber.org/zap/zapcore"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

const (
	controllerName = "controller-runtime-bench"

	managedByLabel = "app.kubernetes.io/managed-by"
	nameLabel      = "app.kubernetes.io/name"
	configHashKey  = "kiln.dev/config-hash"
	credsHashKey   = "kiln.dev/credentials-hash"

	// secretNameField indexes WebApps by spec.secretName in the cache.
	secretNameField = ".spec.secretName"

	waitRequeue = 5 * time.Second
)

// WebAppReconciler applies a WebApp's children and reports their readiness.
type WebAppReconciler struct {
	client.Client
	FieldManager string
	Resync       time.Duration
}

func (r *WebAppReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var app WebApp
	if err := r.Get(ctx, req.NamespacedName, &app); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	status := app.Status.DeepCopy()
	status.ObservedGeneration = app.Generation

	// 1. The Secret, from the cache.
	var secret corev1.Secret
	if err := r.Get(ctx, types.NamespacedName{Namespace: app.Namespace, Name: app.Spec.SecretName}, &secret); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
		meta.SetStatusCondition(&status.Conditions, metav1.Condition{
			Type: "Ready", Status: metav1.ConditionFalse, Reason: "DependencyMissing",
			Message:            fmt.Sprintf("waiting for Secret %s/%s", app.Namespace, app.Spec.SecretName),
			ObservedGeneration: app.Generation,
		})
		return ctrl.Result{RequeueAfter: waitRequeue}, r.writeStatus(ctx, &app, status)
	}

	// 2. The children, server-side applied with forced ownership.
	owner := metav1ac.OwnerReference().
		WithAPIVersion(GroupVersion.String()).
		WithKind("WebApp").
		WithName(app.Name).
		WithUID(app.UID).
		WithController(true).
		WithBlockOwnerDeletion(true)
	applyOpts := []client.ApplyOption{client.FieldOwner(r.FieldManager), client.ForceOwnership}

	config := app.Spec.Config
	if config == nil {
		config = map[string]string{}
	}
	configMapName := app.Name + "-config"
	cm := corev1ac.ConfigMap(configMapName, app.Namespace).
		WithLabels(map[string]string{managedByLabel: controllerName}).
		WithOwnerReferences(owner).
		WithData(config)
	if err := r.Apply(ctx, cm, applyOpts...); err != nil {
		return ctrl.Result{}, fmt.Errorf("applying ConfigMap %s: %w", configMapName, err)
	}

	selector := map[string]string{nameLabel: app.Name}
	dep := appsv1ac.Deployment(app.Name, app.Namespace).
		WithLabels(map[string]string{managedByLabel: controllerName, nameLabel: app.Name}).
		WithOwnerReferences(owner).
		WithSpec(appsv1ac.DeploymentSpec().
			WithReplicas(app.Spec.Replicas).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(selector)).
			WithTemplate(corev1ac.PodTemplateSpec().
				WithLabels(selector).
				WithAnnotations(map[string]string{
					configHashKey: hashJSON(config),
					credsHashKey:  hashJSON(secret.Data),
				}).
				WithSpec(corev1ac.PodSpec().
					WithContainers(corev1ac.Container().
						WithName("app").
						WithImage(app.Spec.Image).
						WithPorts(corev1ac.ContainerPort().WithName("http").WithContainerPort(app.Spec.Port)).
						WithEnvFrom(corev1ac.EnvFromSource().
							WithConfigMapRef(corev1ac.ConfigMapEnvSource().WithName(configMapName))).
						WithEnv(corev1ac.EnvVar().
							WithName("PASSWORD").
							WithValueFrom(corev1ac.EnvVarSource().
								WithSecretKeyRef(corev1ac.SecretKeySelector().
									WithName(app.Spec.SecretName).
									WithKey("password"))))))))
	// Apply fills dep with the object the API server returns, status included.
	if err := r.Apply(ctx, dep, applyOpts...); err != nil {
		return ctrl.Result{}, fmt.Errorf("applying Deployment %s: %w", app.Name, err)
	}

	svc := corev1ac.Service(app.Name, app.Namespace).
		WithLabels(map[string]string{managedByLabel: controllerName}).
		WithOwnerReferences(owner).
		WithSpec(corev1ac.ServiceSpec().
			WithSelector(selector).
			WithPorts(corev1ac.ServicePort().
				WithName("http").
				WithPort(80).
				WithTargetPort(intstr.FromString("http"))))
	if err := r.Apply(ctx, svc, applyOpts...); err != nil {
		return ctrl.Result{}, fmt.Errorf("applying Service %s: %w", app.Name, err)
	}

	// 3. Readiness of the Deployment as the apply returned it.
	var readyReplicas, wantReplicas int32
	if dep.Status != nil && dep.Status.ReadyReplicas != nil {
		readyReplicas = *dep.Status.ReadyReplicas
	}
	if dep.Spec != nil && dep.Spec.Replicas != nil {
		wantReplicas = *dep.Spec.Replicas
	}
	ready := readyReplicas >= wantReplicas

	// 4. Status.
	status.URL = fmt.Sprintf("http://%s.%s.svc", app.Name, app.Namespace)
	status.ReadyReplicas = &readyReplicas
	readyCond := metav1.Condition{
		Type: "Ready", Status: metav1.ConditionTrue, Reason: "AllChildrenReady",
		Message: "all children are ready", ObservedGeneration: app.Generation,
	}
	if !ready {
		readyCond.Status = metav1.ConditionFalse
		readyCond.Reason = "ChildrenNotReady"
		readyCond.Message = "not ready: deployment/" + app.Name
	}
	meta.SetStatusCondition(&status.Conditions, readyCond)
	meta.SetStatusCondition(&status.Conditions, metav1.Condition{
		Type: "Reconciled", Status: metav1.ConditionTrue, Reason: "Applied",
		Message: "all children applied", ObservedGeneration: app.Generation,
	})
	if err := r.writeStatus(ctx, &app, status); err != nil {
		return ctrl.Result{}, err
	}

	// 5. Requeue.
	if !ready {
		return ctrl.Result{RequeueAfter: waitRequeue}, nil
	}
	return ctrl.Result{RequeueAfter: r.Resync}, nil
}

// writeStatus patches the status subresource only when it changed.
func (r *WebAppReconciler) writeStatus(ctx context.Context, app *WebApp, status *WebAppStatus) error {
	if equality.Semantic.DeepEqual(app.Status, *status) {
		return nil
	}
	base := app.DeepCopy()
	app.Status = *status
	return r.Status().Patch(ctx, app, client.MergeFrom(base))
}

// webAppsForSecret maps a Secret to the WebApps in its namespace that name it.
func (r *WebAppReconciler) webAppsForSecret(ctx context.Context, secret client.Object) []reconcile.Request {
	var apps WebAppList
	if err := r.List(ctx, &apps,
		client.InNamespace(secret.GetNamespace()),
		client.MatchingFields{secretNameField: secret.GetName()},
	); err != nil {
		log.FromContext(ctx).Error(err, "listing WebApps for Secret", "secret", secret.GetName())
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(apps.Items))
	for _, app := range apps.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&app)})
	}
	return reqs
}

// hashJSON is the hex sha256 of v's compact JSON (maps marshal with sorted keys).
func hashJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // maps of strings and bytes always marshal
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func main() {
	var (
		namespace     string
		concurrency   int
		resyncSeconds int
		fieldManager  string
		rules         int
		kinds         int
		generation    string
		generationOf  string
	)
	flag.StringVar(&namespace, "namespace", "", "watch and write only in this namespace")
	flag.IntVar(&concurrency, "concurrency", 16, "reconcile at most this many WebApps at once")
	flag.IntVar(&resyncSeconds, "resync-seconds", 90, "reconcile a ready WebApp again after this many seconds")
	flag.StringVar(&fieldManager, "field-manager", controllerName, "server-side apply field manager")
	flag.IntVar(&rules, "rules", 0, "the rules axis: do the job of this many bench rules over App0 … (0: WebApps)")
	flag.IntVar(&kinds, "kinds", 10, "the rules axis: rule i is on kind App(i mod kinds), at most 10")
	flag.StringVar(&generation, "generation", "g0", "the rules axis: the generation label of every rule's children")
	flag.StringVar(&generationOf, "generation-of", "", "the rules axis: other generations of some rules, r000=e1,…")
	flag.Parse()

	ctrl.SetLogger(zap.New(zap.Level(zapcore.InfoLevel)))
	setupLog := ctrl.Log.WithName("setup")
	if namespace == "" {
		setupLog.Error(nil, "--namespace is required")
		os.Exit(2)
	}

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		setupLog.Error(err, "registering client-go types")
		os.Exit(1)
	}
	if err := SchemeBuilder.AddToScheme(scheme); err != nil {
		setupLog.Error(err, "registering WebApp")
		os.Exit(1)
	}
	generations, err := parseGenerations(generationOf)
	if err != nil {
		setupLog.Error(err, "parsing flags")
		os.Exit(2)
	}
	apps := &appsConfig{
		Rules: rules, Kinds: max(min(kinds, len(appKinds), rules), 1), Generation: generation,
		GenerationOf: generations, FieldManager: fieldManager,
		Resync: time.Duration(resyncSeconds) * time.Second, Concurrency: concurrency,
	}
	if rules > 0 {
		registerApps(scheme, apps.Kinds)
	}

	// ctrl.GetConfig reads KUBECONFIG and, since the rest.Config leaves QPS
	// at 0, sets QPS to -1: controller-runtime's default is no client-side
	// rate limiting (API Priority and Fairness does the limiting). Kept.
	cfg, err := ctrl.GetConfig()
	if err != nil {
		setupLog.Error(err, "loading kubeconfig")
		os.Exit(1)
	}

	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{namespace: {}}},
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		LeaderElection:         false,
	})
	if err != nil {
		setupLog.Error(err, "creating manager")
		os.Exit(1)
	}

	ctx := ctrl.SetupSignalHandler()
	if rules > 0 {
		if err := setupApps(mgr, apps); err != nil {
			setupLog.Error(err, "creating the controllers of App0 …")
			os.Exit(1)
		}
	} else if err := setupWebApps(ctx, mgr, fieldManager, resyncSeconds, concurrency); err != nil {
		setupLog.Error(err, "creating the WebApp controller")
		os.Exit(1)
	}

	if err := mgr.Start(ctx); err != nil {
		setupLog.Error(err, "running manager")
		os.Exit(1)
	}
}

// setupWebApps adds the WebApp controller and its index.
func setupWebApps(ctx context.Context, mgr ctrl.Manager, fieldManager string, resyncSeconds, concurrency int) error {
	if err := mgr.GetFieldIndexer().IndexField(ctx, &WebApp{}, secretNameField, func(o client.Object) []string {
		return []string{o.(*WebApp).Spec.SecretName}
	}); err != nil {
		return fmt.Errorf("indexing WebApps by spec.secretName: %w", err)
	}
	r := &WebAppReconciler{
		Client:       mgr.GetClient(),
		FieldManager: fieldManager,
		Resync:       time.Duration(resyncSeconds) * time.Second,
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&WebApp{}).
		Owns(&appsv1.Deployment{}).
		Owns(&corev1.Service{}).
		Owns(&corev1.ConfigMap{}).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.webAppsForSecret)).
		WithOptions(controller.Options{MaxConcurrentReconciles: concurrency}).
		Complete(r)
}
