// Added by governor (tests/hpa_diff) to a build-time copy of
// k8s.io/kubernetes/pkg/controller/podautoscaler; not upstream code. It opens the package's
// unexported controller to the differential test: one HorizontalController per case, whose
// reconcileAutoscaler runs on an injected clock (clock.patch turns the package's time.Now()
// calls into clockNow()).
package podautoscaler

import (
	"context"
	"sync"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	autoscalingclient "k8s.io/client-go/kubernetes/typed/autoscaling/v2"
	corelisters "k8s.io/client-go/listers/core/v1"
	scaleclient "k8s.io/client-go/scale"
	"k8s.io/client-go/tools/record"
	metricsclient "k8s.io/kubernetes/pkg/controller/podautoscaler/metrics"
	"k8s.io/kubernetes/pkg/controller/podautoscaler/monitor"
	"k8s.io/kubernetes/pkg/controller/util/selectors"
)

// clockNow is what the patched package reads instead of time.Now.
var clockNow = time.Now

// SetClock makes every clock read of the package return what now returns.
func SetClock(now func() time.Time) { clockNow = now }

// Options are the controller's flags that decide replicas
// (--horizontal-pod-autoscaler-tolerance, -downscale-stabilization, -cpu-initialization-period,
// -initial-readiness-delay).
type Options struct {
	Tolerance                     float64
	DownscaleStabilisationWindow  time.Duration
	CPUInitializationPeriod       time.Duration
	DelayOfInitialReadinessStatus time.Duration
}

// Controller is one HPA controller with its own recommendation and scale-event history.
type Controller struct {
	hc *HorizontalController
}

// NewController builds the controller as NewHorizontalController does, without informers,
// work queue or event broadcaster (events are dropped: nothing reads them here).
func NewController(
	scales scaleclient.ScalesGetter,
	hpas autoscalingclient.HorizontalPodAutoscalersGetter,
	mapper apimeta.RESTMapper,
	metrics metricsclient.MetricsClient,
	pods corelisters.PodLister,
	opts Options,
) *Controller {
	return &Controller{hc: &HorizontalController{
		scaleNamespacer:              scales,
		hpaNamespacer:                hpas,
		mapper:                       mapper,
		tolerance:                    opts.Tolerance,
		replicaCalc:                  NewReplicaCalculator(metrics, pods, opts.CPUInitializationPeriod, opts.DelayOfInitialReadinessStatus),
		eventRecorder:                &record.FakeRecorder{},
		downscaleStabilisationWindow: opts.DownscaleStabilisationWindow,
		monitor:                      monitor.New(),
		podLister:                    pods,
		recommendations:              map[string][]timestampedRecommendation{},
		recommendationsLock:          sync.Mutex{},
		scaleUpEvents:                map[string][]timestampedScaleEvent{},
		scaleDownEvents:              map[string][]timestampedScaleEvent{},
		hpaSelectors:                 selectors.NewBiMultimap(),
	}}
}

// Reconcile runs one sync of the HPA, as the controller's worker does for its key.
func (c *Controller) Reconcile(ctx context.Context, hpa *autoscalingv2.HorizontalPodAutoscaler) error {
	return c.hc.reconcileAutoscaler(ctx, hpa, hpa.Namespace+"/"+hpa.Name)
}
