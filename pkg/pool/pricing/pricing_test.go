package pricing_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/pricing"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/fake"
	"github.com/hangar-ci/hangar/internal/testkit/pricefake"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	pkgpricing "github.com/hangar-ci/hangar/pkg/pool/pricing"
)

// TestPrices: spot prices come from the spot price history of the fake EC2, on-demand ones from
// the Price List stand-in, one request per type, then from the cache; a type the Price List does
// not know has no price.
func TestPrices(t *testing.T) {
	t.Parallel()
	ec2c := &fake.EC2{SpotPrices: map[string]float64{"c7i.large/us-east-1a": 0.0331, "c7i.large/us-east-1b": 0.0357, "m7i.large/us-east-1b": 0.0412}}
	list := pricefake.New(map[string]float64{"us-east-1/c7i.large": 0.0893, "us-east-1/m7i.large": 0.1008})
	defer list.Close()
	pc := pricing.New(pricing.Options{Region: "us-east-1", BaseEndpoint: aws.String(list.URL()),
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", "")})
	p := &pkgpricing.Pricer{EC2: ec2c, List: pc, Region: "us-east-1", Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	got := p.Prices(ctx, []pkgpricing.Instance{
		{Type: "c7i.large", AZ: "us-east-1b", UsageClass: state.UsageSpot},
		{Type: "c7i.large", AZ: "us-east-1a", UsageClass: state.UsageOnDemand},
		{Type: "m7i.large", AZ: "us-east-1a", UsageClass: state.UsageOnDemand},
		{Type: "c7i.large", AZ: "us-east-1c", UsageClass: state.UsageOnDemand},
		{Type: "x9z.huge", AZ: "us-east-1a", UsageClass: state.UsageOnDemand},
		{Type: "m7i.large", AZ: "us-east-1a", UsageClass: state.UsageSpot},
	})
	require.Equal(t, pkgpricing.Price{USD: 0.0357, Source: state.PriceSpot}, got[0], "the spot price of its own zone")
	require.Equal(t, pkgpricing.Price{USD: 0.0893, Source: state.PriceOnDemand}, got[1])
	require.Equal(t, pkgpricing.Price{USD: 0.1008, Source: state.PriceOnDemand}, got[2])
	require.Equal(t, got[1], got[3])
	require.False(t, got[4].Known(), "no price in the Price List: unknown, never invented")
	require.False(t, got[5].Known(), "no spot price in its zone: unknown, never another zone's")
	require.Equal(t, 3, list.Requests(), "one request per on-demand type")
	require.Equal(t, 1, ec2c.Calls("DescribeSpotPriceHistory"), "one spot history request for every spot instance")

	again := p.Prices(ctx, []pkgpricing.Instance{{Type: "m7i.large", AZ: "us-east-1a", UsageClass: state.UsageOnDemand}})
	require.Equal(t, got[2], again[0])
	require.Equal(t, 3, list.Requests(), "cached per type and region")
}

// TestPricesUnavailable: a Price List or spot history that fails leaves the price unknown.
func TestPricesUnavailable(t *testing.T) {
	t.Parallel()
	ec2c := &fake.EC2{}
	ec2c.Inject("DescribeSpotPriceHistory", fake.APIError("UnauthorizedOperation", "not allowed"))
	p := &pkgpricing.Pricer{EC2: ec2c, List: failing{}, Region: "us-east-1"}
	got := p.Prices(context.Background(), []pkgpricing.Instance{{Type: "c7i.large", AZ: "us-east-1a", UsageClass: state.UsageSpot},
		{Type: "c7i.large", AZ: "us-east-1a", UsageClass: state.UsageOnDemand}})
	require.False(t, got[0].Known())
	require.False(t, got[1].Known())
}

// failing is a Price List that refuses every request (there is no fake of the Price List API: its
// stand-in, pricefake, answers over HTTP).
type failing struct{}

func (failing) GetProducts(context.Context, *pricing.GetProductsInput, ...func(*pricing.Options)) (*pricing.GetProductsOutput, error) {
	return nil, errors.New("AccessDeniedException")
}
