package pooldoc_test

import (
	"context"
	"encoding/json"
	"os"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	ssmtypes "github.com/aws/aws-sdk-go-v2/service/ssm/types"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/fake"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
)

// TestLoadFromSSM publishes documents the way the stack does and reads them back from the fake
// SSM.
func TestLoadFromSSM(t *testing.T) {
	t.Parallel()
	client := &fake.SSM{}
	ctx := context.Background()
	stack := "hangar"
	raw, err := os.ReadFile("testdata/pool.json")
	require.NoError(t, err)

	put := func(pool string, body []byte) { publish(t, client, stack, pool, body) }
	put("linux-x64", raw)
	var m map[string]any
	require.NoError(t, json.Unmarshal(raw, &m))
	m["name"] = "arm64"
	b, _ := json.Marshal(m)
	put("arm64", b)
	put("broken", []byte(`{"schemaVersion":2,"name":"broken"}`))
	m["name"] = "other"
	b, _ = json.Marshal(m)
	publish(t, client, stack+"-other", "other", b) // another stack's, whose name starts alike

	d, err := pooldoc.Load(ctx, client, stack, "linux-x64")
	require.NoError(t, err)
	require.Equal(t, "linux-x64", d.Name)

	_, err = pooldoc.Load(ctx, client, stack, "missing")
	require.ErrorContains(t, err, "/pools/missing")

	docs, err := pooldoc.LoadAll(ctx, client, stack)
	require.ErrorContains(t, err, "/pools/broken", "the broken pool is reported")
	names := []string{}
	for _, d := range docs {
		names = append(names, d.Name)
	}
	require.ElementsMatch(t, []string{"linux-x64", "arm64"}, names, "the good pools still load, and only the stack's own")
}

// TestLoadStack: a stack is its readable pools and the table they share; pools that disagree on
// the table, or a stack with no documents, are errors that say what to check.
func TestLoadStack(t *testing.T) {
	t.Parallel()
	client := &fake.SSM{}
	ctx := context.Background()
	stack := "hangar"
	raw, err := os.ReadFile("testdata/pool.json")
	require.NoError(t, err)
	put := func(pool string, change func(map[string]any)) {
		var m map[string]any
		require.NoError(t, json.Unmarshal(raw, &m))
		m["name"] = pool
		change(m)
		b, _ := json.Marshal(m)
		publish(t, client, stack, pool, b)
	}

	_, err = pooldoc.LoadStack(ctx, client, stack)
	require.ErrorContains(t, err, "no pool documents under /hangar/"+stack+"/pools/")

	put("a", func(map[string]any) {})
	put("b", func(map[string]any) {})
	put("broken", func(m map[string]any) { m["market"] = "nope" })
	s, err := pooldoc.LoadStack(ctx, client, stack)
	require.NoError(t, err)
	require.Len(t, s.Pools, 2)
	require.NotNil(t, s.Pool("b"))
	require.Nil(t, s.Pool("broken"))
	require.ErrorContains(t, s.Problems, "/pools/broken")
	require.Equal(t, s.Pools[0].Table, s.Table)
	require.Equal(t, s.Pools[0].StateAccount(), s.Account)

	put("c", func(m map[string]any) { m["table"] = "another-table" })
	_, err = pooldoc.LoadStack(ctx, client, stack)
	require.ErrorContains(t, err, "pools c name another state table")
}

// publish puts a pool document where the stack publishes it.
func publish(t *testing.T, client *fake.SSM, stack, pool string, body []byte) {
	t.Helper()
	_, err := client.PutParameter(context.Background(), &ssm.PutParameterInput{Name: aws.String(pooldoc.ParameterName(stack, pool)),
		Value: aws.String(string(body)), Type: ssmtypes.ParameterTypeString, Overwrite: aws.Bool(true)})
	require.NoError(t, err)
}
