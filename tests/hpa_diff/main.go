// hpa-diff: runs differential-test cases through the upstream HPA controller.
//
// A stream of requests on stdin, one response line per request on stdout:
//
//	{"syncs": [{"case": 1, "setup": Setup (first sync of a case only), "step": Step}, ...]}
//	{"features": {...}, "results": [{"case": 1, "desired": 3, "error": "..."}, ...]}
//
// Each case is one HorizontalPodAutoscaler (autoscaling/v2 spec, defaulted as the API server
// does) with its own controller; each sync runs reconcileAutoscaler against the step's pods,
// metrics and scale, on a clock set to the step's time. The controller keeps its
// recommendations and scale events between a case's syncs, as it does between resyncs, so one
// process answers a batch of thousands of cases step by step. See README.md.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	v1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	autoscalingclient "k8s.io/client-go/kubernetes/typed/autoscaling/v2"
	corelisters "k8s.io/client-go/listers/core/v1"
	scaleclient "k8s.io/client-go/scale"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	hpav2 "k8s.io/kubernetes/pkg/apis/autoscaling/v2"
	"k8s.io/kubernetes/pkg/features"

	"governor.dev/hpadiff/podautoscaler"
	metricsclient "k8s.io/kubernetes/pkg/controller/podautoscaler/metrics"
)

const (
	namespace = "ns"
	selector  = "app=target"
)

// PodMetric is one pod's sample of one metric: a milli-value, its age and window at the step.
type PodMetric struct {
	Value         int64   `json:"value"`
	AgoSeconds    float64 `json:"agoSeconds"`
	WindowSeconds float64 `json:"windowSeconds"`
}

// Pod is one pod of the target at a step. Ready is the Ready condition's status ("True",
// "False", or "" for no condition); a negative StartedAgo means no start time yet.
type Pod struct {
	Name          string               `json:"name"`
	Phase         string               `json:"phase"`
	Ready         string               `json:"ready"`
	StartedAgo    float64              `json:"startedAgo"`
	TransitionAgo float64              `json:"transitionAgo"`
	Deleting      bool                 `json:"deleting"`
	Requests      map[string]int64     `json:"requests"`
	Metrics       map[string]PodMetric `json:"metrics"`
}

// Step is one sync: the time, the target's scale, its pods, and the object/external metrics
// (a null value makes the metrics API fail for that metric).
type Step struct {
	At             int64             `json:"at"` // unix milliseconds
	SpecReplicas   int32             `json:"specReplicas"`
	StatusReplicas int32             `json:"statusReplicas"`
	Pods           []Pod             `json:"pods"`
	External       map[string]*int64 `json:"external"`
	Object         map[string]*int64 `json:"object"`
}

// Setup is one HPA, defaulted as the API server does, and the controller flags that decide
// replicas; it comes with a case's first step.
type Setup struct {
	HPA                      autoscalingv2.HorizontalPodAutoscalerSpec `json:"hpa"`
	Tolerance                float64                                   `json:"tolerance"`
	DownscaleWindowSeconds   int64                                     `json:"downscaleWindowSeconds"`
	CPUInitializationSeconds int64                                     `json:"cpuInitializationSeconds"`
	ReadinessDelaySeconds    int64                                     `json:"readinessDelaySeconds"`
}

// Sync asks for one sync of a case's HPA; Setup is set on the case's first sync only.
type Sync struct {
	Case  int    `json:"case"`
	Setup *Setup `json:"setup"`
	Step  Step   `json:"step"`
}

// Synced is the replicas the target has after the sync, and the sync's error if any.
type Synced struct {
	Case    int    `json:"case"`
	Desired int32  `json:"desired"`
	Error   string `json:"error,omitempty"`
}

type request struct {
	Syncs []Sync `json:"syncs"`
}

type response struct {
	Features map[string]bool `json:"features"`
	Results  []Synced        `json:"results"`
}

func at(ms int64) time.Time { return time.UnixMilli(ms) }

func ago(now time.Time, seconds float64) time.Time {
	return now.Add(-time.Duration(seconds * float64(time.Second)))
}

// --- what the controller reads: metrics API, pods, scale subresource, HPA status ----------------

type metrics struct {
	step *Step
	now  time.Time
}

func (m *metrics) podMetrics(name string) metricsclient.PodMetricsInfo {
	out := metricsclient.PodMetricsInfo{}
	for _, p := range m.step.Pods {
		if s, ok := p.Metrics[name]; ok {
			out[p.Name] = metricsclient.PodMetric{
				Value:     s.Value,
				Timestamp: ago(m.now, s.AgoSeconds),
				Window:    time.Duration(s.WindowSeconds * float64(time.Second)),
			}
		}
	}
	return out
}

func (m *metrics) GetResourceMetric(_ context.Context, res v1.ResourceName, _ string, _ labels.Selector, _ string) (metricsclient.PodMetricsInfo, time.Time, error) {
	info := m.podMetrics(string(res))
	if len(info) == 0 {
		return nil, time.Time{}, fmt.Errorf("no metrics returned from resource metrics API")
	}
	return info, m.now, nil
}

func (m *metrics) GetRawMetric(name string, _ string, _ labels.Selector, _ labels.Selector) (metricsclient.PodMetricsInfo, time.Time, error) {
	info := m.podMetrics(name)
	if len(info) == 0 {
		return nil, time.Time{}, fmt.Errorf("no metrics returned from custom metrics API")
	}
	return info, m.now, nil
}

func (m *metrics) GetObjectMetric(name string, _ string, _ *autoscalingv2.CrossVersionObjectReference, _ labels.Selector) (int64, time.Time, error) {
	v, ok := m.step.Object[name]
	if !ok || v == nil {
		return 0, time.Time{}, fmt.Errorf("object metric %s unavailable", name)
	}
	return *v, m.now, nil
}

func (m *metrics) GetExternalMetric(name string, _ string, _ labels.Selector) ([]int64, time.Time, error) {
	v, ok := m.step.External[name]
	if !ok || v == nil {
		return nil, time.Time{}, fmt.Errorf("external metric %s unavailable", name)
	}
	return []int64{*v}, m.now, nil
}

type scales struct {
	scale   *autoscalingv1.Scale
	updated *int32
}

func (s *scales) Scales(string) scaleclient.ScaleInterface { return s }

func (s *scales) Get(context.Context, schema.GroupResource, string, metav1.GetOptions) (*autoscalingv1.Scale, error) {
	return s.scale.DeepCopy(), nil
}

func (s *scales) Update(_ context.Context, _ schema.GroupResource, scale *autoscalingv1.Scale, _ metav1.UpdateOptions) (*autoscalingv1.Scale, error) {
	r := scale.Spec.Replicas
	s.updated = &r
	return scale, nil
}

func (s *scales) Patch(context.Context, schema.GroupVersionResource, string, types.PatchType, []byte, metav1.PatchOptions) (*autoscalingv1.Scale, error) {
	return nil, fmt.Errorf("patch is not used by the HPA controller")
}

// hpas keeps the status the controller writes, so the next sync starts from it.
type hpas struct {
	autoscalingclient.HorizontalPodAutoscalerInterface // only UpdateStatus is called
	last                                               *autoscalingv2.HorizontalPodAutoscaler
}

func (h *hpas) HorizontalPodAutoscalers(string) autoscalingclient.HorizontalPodAutoscalerInterface {
	return h
}

func (h *hpas) UpdateStatus(_ context.Context, hpa *autoscalingv2.HorizontalPodAutoscaler, _ metav1.UpdateOptions) (*autoscalingv2.HorizontalPodAutoscaler, error) {
	h.last = hpa.DeepCopy()
	return hpa, nil
}

func pod(p Pod, now time.Time) *v1.Pod {
	requests := v1.ResourceList{}
	for name, milli := range p.Requests {
		requests[v1.ResourceName(name)] = *resource.NewMilliQuantity(milli, resource.DecimalSI)
	}
	out := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: namespace, Labels: map[string]string{"app": "target"}},
		Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "app", Resources: v1.ResourceRequirements{Requests: requests}}}},
		Status:     v1.PodStatus{Phase: v1.PodPhase(p.Phase)},
	}
	if p.Deleting {
		t := metav1.NewTime(now)
		out.DeletionTimestamp = &t
	}
	if p.StartedAgo >= 0 {
		t := metav1.NewTime(ago(now, p.StartedAgo))
		out.Status.StartTime = &t
	}
	if p.Ready != "" {
		out.Status.Conditions = []v1.PodCondition{{
			Type:               v1.PodReady,
			Status:             v1.ConditionStatus(p.Ready),
			LastTransitionTime: metav1.NewTime(ago(now, p.TransitionAgo)),
		}}
	}
	return out
}

func restMapper() apimeta.RESTMapper {
	m := apimeta.NewDefaultRESTMapper([]schema.GroupVersion{{Group: "apps", Version: "v1"}})
	m.Add(schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, apimeta.RESTScopeNamespace)
	return m
}

// hpaCase is one case's controller and what it reads, kept between the case's syncs.
type hpaCase struct {
	ctl     *podautoscaler.Controller
	hpa     *autoscalingv2.HorizontalPodAutoscaler
	indexer cache.Indexer
	metrics *metrics
	scales  *scales
	status  *hpas
}

func newCase(id int, s *Setup, mapper apimeta.RESTMapper) *hpaCase {
	c := &hpaCase{
		indexer: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}),
		metrics: &metrics{},
		scales:  &scales{},
		status:  &hpas{},
	}
	c.ctl = podautoscaler.NewController(c.scales, c.status, mapper, c.metrics, corelisters.NewPodLister(c.indexer), podautoscaler.Options{
		Tolerance:                     s.Tolerance,
		DownscaleStabilisationWindow:  time.Duration(s.DownscaleWindowSeconds) * time.Second,
		CPUInitializationPeriod:       time.Duration(s.CPUInitializationSeconds) * time.Second,
		DelayOfInitialReadinessStatus: time.Duration(s.ReadinessDelaySeconds) * time.Second,
	})
	c.hpa = &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("case-%d", id), Namespace: namespace},
		Spec:       s.HPA,
	}
	c.hpa.Spec.ScaleTargetRef = autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "target"}
	hpav2.SetDefaults_HorizontalPodAutoscaler(c.hpa) // what the API server stores
	return c
}

func (c *hpaCase) sync(step *Step) Synced {
	now := at(step.At)
	podautoscaler.SetClock(func() time.Time { return now })
	objs := make([]interface{}, 0, len(step.Pods))
	for _, p := range step.Pods {
		objs = append(objs, pod(p, now))
	}
	if err := c.indexer.Replace(objs, ""); err != nil {
		panic(err)
	}
	c.metrics.step, c.metrics.now = step, now
	c.scales.scale = &autoscalingv1.Scale{
		ObjectMeta: metav1.ObjectMeta{Name: "target", Namespace: namespace},
		Spec:       autoscalingv1.ScaleSpec{Replicas: step.SpecReplicas},
		Status:     autoscalingv1.ScaleStatus{Replicas: step.StatusReplicas, Selector: selector},
	}
	c.scales.updated = nil
	out := Synced{Desired: step.SpecReplicas}
	if err := c.ctl.Reconcile(context.Background(), c.hpa); err != nil {
		out.Error = err.Error()
	}
	if c.scales.updated != nil {
		out.Desired = *c.scales.updated
	}
	if c.status.last != nil { // the next sync starts from the status this one wrote
		c.hpa, c.status.last = c.status.last, nil
	}
	// The pods are the step's alone; thousands of cases waiting for their next sync would
	// otherwise hold every pod of their last one.
	if err := c.indexer.Replace(nil, ""); err != nil {
		panic(err)
	}
	c.metrics.step = nil
	return out
}

func main() {
	// The controller logs every rescale; thousands of cases would only flood stderr.
	klog.LogToStderr(false)
	klog.SetOutput(io.Discard)
	mapper := restMapper()
	feats := map[string]bool{
		string(features.HPAConfigurableTolerance): utilfeature.DefaultFeatureGate.Enabled(features.HPAConfigurableTolerance),
		string(features.HPAScaleToZero):           utilfeature.DefaultFeatureGate.Enabled(features.HPAScaleToZero),
	}
	cases := map[int]*hpaCase{}
	dec := json.NewDecoder(bufio.NewReaderSize(os.Stdin, 1<<20))
	dec.DisallowUnknownFields()
	w := bufio.NewWriterSize(os.Stdout, 1<<20)
	enc := json.NewEncoder(w)
	for {
		var req request
		if err := dec.Decode(&req); err == io.EOF {
			return
		} else if err != nil {
			fmt.Fprintf(os.Stderr, "hpa-diff: bad request: %v\n", err)
			os.Exit(2)
		}
		resp := response{Features: feats, Results: make([]Synced, 0, len(req.Syncs))}
		for i := range req.Syncs {
			s := &req.Syncs[i]
			c, ok := cases[s.Case]
			if s.Setup != nil {
				c = newCase(s.Case, s.Setup, mapper)
				cases[s.Case] = c
			} else if !ok {
				fmt.Fprintf(os.Stderr, "hpa-diff: case %d: first sync without setup\n", s.Case)
				os.Exit(2)
			}
			r := c.sync(&s.Step)
			r.Case = s.Case
			resp.Results = append(resp.Results, r)
		}
		if err := enc.Encode(resp); err != nil {
			fmt.Fprintf(os.Stderr, "hpa-diff: %v\n", err)
			os.Exit(1)
		}
		if err := w.Flush(); err != nil {
			os.Exit(1)
		}
	}
}
