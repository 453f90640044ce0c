package poolconfig_test

import (
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	ssmtypes "github.com/aws/aws-sdk-go-v2/service/ssm/types"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/testbed"
	"github.com/hangar-ci/hangar/pkg/poolconfig"
)

// TestLoadFromSSM publishes documents the way the stack does and reads them back from moto.
func TestLoadFromSSM(t *testing.T) {
	t.Parallel()
	client := ssm.NewFromConfig(testbed.AWSConfig(t))
	ctx := testbed.Context(t, 30*time.Second)
	stack := testbed.Name(t, "stack")
	raw, err := os.ReadFile("testdata/pool.json")
	require.NoError(t, err)

	put := func(pool string, body []byte) {
		_, err := client.PutParameter(ctx, &ssm.PutParameterInput{Name: aws.String(poolconfig.ParameterName(stack, pool)),
			Value: aws.String(string(body)), Type: ssmtypes.ParameterTypeString, Overwrite: aws.Bool(true)})
		require.NoError(t, err)
	}
	put("linux-x64", raw)
	var m map[string]any
	require.NoError(t, json.Unmarshal(raw, &m))
	m["name"] = "arm64"
	b, _ := json.Marshal(m)
	put("arm64", b)
	put("broken", []byte(`{"schemaVersion":1,"name":"broken"}`))

	d, err := poolconfig.Load(ctx, client, stack, "linux-x64")
	require.NoError(t, err)
	require.Equal(t, "linux-x64", d.Name)

	_, err = poolconfig.Load(ctx, client, stack, "missing")
	require.ErrorContains(t, err, "/pools/missing")

	docs, err := poolconfig.LoadAll(ctx, client, stack)
	require.ErrorContains(t, err, "/pools/broken", "the broken pool is reported")
	names := []string{}
	for _, d := range docs {
		names = append(names, d.Name)
	}
	require.ElementsMatch(t, []string{"linux-x64", "arm64"}, names, "the good pools still load")
}
