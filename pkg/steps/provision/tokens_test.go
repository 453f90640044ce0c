package provision_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/awsproxy"
	"github.com/hangar-ci/hangar/internal/testkit/localenv"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/platform/awsapi"
	"github.com/hangar-ci/hangar/pkg/pool/doorbell"
	"github.com/hangar-ci/hangar/pkg/steps/provision"
	"github.com/hangar-ci/hangar/pkg/steps/release"
)

// The two tests here run on the emulators with real agents: their subject is what DynamoDB is
// sent and stores (TestNoTokenReachesTheTable), and the doorbell protocol between provision and
// real agents over SQS (TestLostOrRepeatedHandOver; provision's side of a lost hand-over runs on
// the fakes too, TestFakeAskedAgainHandsOverAgain).

// TestNoTokenReachesTheTable: a provision that claims one instance and creates another, and the
// release after it, send every DynamoDB request through a recording proxy; no request carries a
// registration token the GitHub stand-in issued, and no item holds one (nor any attribute named
// for a secret). The tokens reached the agents through their doorbells alone: both registered.
func TestNoTokenReachesTheTable(t *testing.T) {
	t.Parallel()
	e := newEnv(t, localenv.Options{})
	warm := e.mustProvision("7931", 1) // one pooled instance: the next provision claims it and creates one
	e.release("7931")

	proxy, err := awsproxy.New(aws.ToString(e.DynamoDB().Options().BaseEndpoint), 1)
	require.NoError(t, err)
	t.Cleanup(proxy.Close)
	proxy.Record(100_000)
	w := *e.w
	clients := *w.Clients
	clients.DynamoDB = dynamodb.NewFromConfig(e.AWS, func(o *dynamodb.Options) {
		o.BaseEndpoint = aws.String(proxy.URL())
		o.DisableValidateResponseChecksum = true
	})
	w.Clients = &clients
	deps, err := w.Provision(e.ctx, e.Pool)
	require.NoError(t, err)
	res, err := provision.Run(e.ctx, e.config("7932", 2), deps)
	require.NoError(t, err)
	require.Equal(t, 1, res.Reused)
	require.Equal(t, 1, res.Created)
	require.Contains(t, ids(res), warm.Instances[0].ID)
	releaser, _, err := w.Release(e.ctx, release.Config{DeregisterTimeout: 30 * time.Second})
	require.NoError(t, err)
	rel, err := releaser.Release(e.ctx, "7932")
	require.NoError(t, err)
	require.Equal(t, 2, rel.RunnersDeleted, "release deleted both runners through the API")
	require.Zero(t, e.GH.Minted("remove"), "no remove token was ever minted")

	secrets := e.GH.Secrets()
	require.Len(t, secrets, 2, "one registration token per provision")
	recorded := proxy.Recorded()
	require.NotEmpty(t, recorded)
	writes := 0
	for _, r := range recorded {
		if awsproxy.Mutating(r.Op) {
			writes++
		}
		for _, s := range secrets {
			require.NotContains(t, string(r.Body), s, "%s carries a registration token", r.Op)
		}
		for _, attr := range []string{"regToken", "jitConfig", "removeToken"} {
			require.NotContains(t, string(r.Body), `"`+attr+`":{"S"`, "%s writes %s", r.Op, attr)
		}
	}
	require.Positive(t, writes, "the claims, creations and transitions went through the proxy")

	scan := e.scanTable()
	require.NotEmpty(t, scan)
	for _, item := range scan {
		for _, s := range secrets {
			require.NotContains(t, item, s, "an item holds a registration token")
		}
	}
	require.Empty(t, e.GH.Runners(""))
	offered := e.offered()
	for id, it := range e.items(ids(res)) {
		require.Equal(t, state.Idle, it.State, id)
		require.Equal(t, state.SignalDeregistered, it.Signal)
		require.Equal(t, 1, offered[id], "and offered")
	}
}

// scanTable returns every item of the table as text (a test's look at what is stored: Hangar
// itself never scans).
func (e *env) scanTable() []string {
	e.t.Helper()
	var out []string
	p := dynamodb.NewScanPaginator(e.DynamoDB(), &dynamodb.ScanInput{TableName: aws.String(e.Table)})
	for p.HasMorePages() {
		page, err := p.NextPage(e.ctx)
		require.NoError(e.t, err)
		for _, it := range page.Items {
			var m map[string]any
			require.NoError(e.t, attributevalue.UnmarshalMap(it, &m))
			out = append(out, fmt.Sprintf("%v", m))
		}
	}
	return out
}

// lossyBells is a doorbell client that drops or repeats hand-overs: the first one sent to each
// doorbell is lost (drop), or every one is sent twice (repeat). Plain rings pass unchanged.
type lossyBells struct {
	awsapi.SQS
	drop, repeat bool
	mu           sync.Mutex
	dropped      map[string]int
	sent         map[string]int
}

func (l *lossyBells) SendMessage(ctx context.Context, in *sqs.SendMessageInput, o ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	url := aws.ToString(in.QueueUrl)
	if strings.HasPrefix(aws.ToString(in.MessageBody), "{") {
		l.mu.Lock()
		lose := l.drop && l.dropped[url] == 0
		if lose {
			l.dropped[url]++
		} else {
			l.sent[url]++
		}
		l.mu.Unlock()
		if lose {
			return &sqs.SendMessageOutput{MessageId: aws.String("lost")}, nil
		}
		if l.repeat {
			if _, err := l.SQS.SendMessage(ctx, in, o...); err != nil {
				return nil, err
			}
		}
	}
	return l.SQS.SendMessage(ctx, in, o...)
}

// TestLostOrRepeatedHandOver: the doorbell loses the first hand-over to each instance (the agent
// asks for it, and provision hands it over again), or delivers every hand-over twice (the agent
// registers once). Either way every runner registers, exactly one per instance, and the run
// gets its instances.
func TestLostOrRepeatedHandOver(t *testing.T) {
	t.Parallel()
	e := newEnv(t, localenv.Options{})
	pooled := e.mustProvision("7941", 2) // two pooled instances: the next provisions claim them
	e.release("7941")
	for i, tc := range []struct {
		name         string
		drop, repeat bool
	}{{"lost", true, false}, {"repeated", false, true}} {
		run := []string{"7942", "7943"}[i]
		deps, err := e.w.Provision(e.ctx, e.Pool)
		require.NoError(t, err)
		lossy := &lossyBells{SQS: deps.Pool.Bells.SQS, drop: tc.drop, repeat: tc.repeat, dropped: map[string]int{}, sent: map[string]int{}}
		deps.Pool.Bells = &doorbell.Bells{SQS: lossy, Stack: deps.Pool.Bells.Stack, Base: deps.Pool.Bells.Base, Manages: deps.Pool.Bells.Manages}
		res, err := provision.Run(e.ctx, e.config(run, 2), deps)
		require.NoError(t, err, tc.name)
		require.Equal(t, 2, res.Reused, tc.name)
		require.ElementsMatch(t, ids(pooled), ids(res), tc.name)
		for _, id := range ids(res) {
			url := e.bellOf(id)
			if tc.drop {
				require.Equal(t, 1, lossy.dropped[url], "%s: the first hand-over to %s was lost", tc.name, id)
				require.Equal(t, 1, lossy.sent[url], "%s: %s asked once and got it once", tc.name, id)
			} else {
				require.Equal(t, 1, lossy.sent[url], "%s: one hand-over to %s, sent twice", tc.name, id)
			}
		}
		for id, it := range e.items(ids(res)) {
			require.Equal(t, state.Running, it.State, "%s: %s", tc.name, id)
			if tc.drop {
				require.Equal(t, 1, it.Asks, "%s: %s asked once", tc.name, id)
			}
		}
		require.Len(t, e.GH.Runners(localenv.Repo), 2, "%s: one runner per instance", tc.name)
		e.release(run)
	}
}

// bellOf returns an instance's doorbell URL.
func (e *env) bellOf(id string) string {
	e.t.Helper()
	it, err := e.Store.Get(e.ctx, id)
	require.NoError(e.t, err)
	return it.Bell
}
