package pricing

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/pricing"
	pricingtypes "github.com/aws/aws-sdk-go-v2/service/pricing/types"

	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/platform/awsapi"
)

// Instance is what a price depends on.
type Instance struct {
	Type, AZ, UsageClass string
}

// Price is an hourly price in US dollars and where it came from (state.PriceSpot,
// state.PriceOnDemand); a zero Price is unknown.
type Price struct {
	USD    float64
	Source string
}

// Known reports whether the price was found.
func (p Price) Known() bool { return p.Source != "" }

// Pricer finds prices. It is safe for concurrent use.
type Pricer struct {
	EC2  awsapi.EC2
	List awsapi.PriceList
	// Region is the region instances are launched in (the Price List's regionCode).
	Region string
	Log    *slog.Logger
	// Now is the clock the spot history is read at; time.Now when nil.
	Now func() time.Time

	mu       sync.Mutex
	onDemand map[string]Price // by instance type, in Region
}

// Prices returns the price of each instance, in order: one spot history request for all the
// spot instances, one Price List request per on-demand type not yet cached. What cannot be had
// is an unknown price, logged, never an error: a launch never waits on a price.
func (p *Pricer) Prices(ctx context.Context, insts []Instance) []Price {
	out := make([]Price, len(insts))
	var spotTypes []string
	for _, in := range insts {
		if in.UsageClass == state.UsageSpot && !slices.Contains(spotTypes, in.Type) {
			spotTypes = append(spotTypes, in.Type)
		}
	}
	spot := p.spot(ctx, spotTypes)
	for i, in := range insts {
		switch in.UsageClass {
		case state.UsageSpot:
			if usd, ok := spot[in.Type+"/"+in.AZ]; ok {
				out[i] = Price{USD: usd, Source: state.PriceSpot}
			}
		case state.UsageOnDemand:
			out[i] = p.onDemandPrice(ctx, in.Type)
		}
	}
	return out
}

// spot reads the latest spot price of each type in each zone of the region ("type/az" → USD).
func (p *Pricer) spot(ctx context.Context, types []string) map[string]float64 {
	out := map[string]float64{}
	if len(types) == 0 || p.EC2 == nil {
		return out
	}
	now := time.Now
	if p.Now != nil {
		now = p.Now
	}
	in := &ec2.DescribeSpotPriceHistoryInput{ProductDescriptions: []string{"Linux/UNIX"}, StartTime: aws.Time(now())}
	for _, t := range types {
		in.InstanceTypes = append(in.InstanceTypes, ec2types.InstanceType(t))
	}
	latest := map[string]time.Time{}
	pages := ec2.NewDescribeSpotPriceHistoryPaginator(p.EC2, in)
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			p.log().Warn("spot prices unknown: read the spot price history", "types", types, "error", err)
			return out
		}
		for _, h := range page.SpotPriceHistory {
			usd, err := strconv.ParseFloat(aws.ToString(h.SpotPrice), 64)
			if err != nil || usd <= 0 {
				continue
			}
			k := string(h.InstanceType) + "/" + aws.ToString(h.AvailabilityZone)
			if at := aws.ToTime(h.Timestamp); at.After(latest[k]) || latest[k].IsZero() {
				latest[k], out[k] = at, usd
			}
		}
	}
	return out
}

// onDemandPrice returns the on-demand price of type in the region, from the cache or the Price
// List.
func (p *Pricer) onDemandPrice(ctx context.Context, typ string) Price {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pr, ok := p.onDemand[typ]; ok {
		return pr
	}
	pr, err := p.lookup(ctx, typ)
	if err != nil {
		p.log().Warn("on-demand price unknown", "type", typ, "region", p.Region, "error", err)
		return Price{} // not cached: the next launch asks again
	}
	if p.onDemand == nil {
		p.onDemand = map[string]Price{}
	}
	p.onDemand[typ] = pr
	return pr
}

// lookup asks the Price List for one type's Linux, shared-tenancy on-demand price.
func (p *Pricer) lookup(ctx context.Context, typ string) (Price, error) {
	if p.List == nil {
		return Price{}, fmt.Errorf("no Price List client")
	}
	match := func(field, value string) pricingtypes.Filter {
		return pricingtypes.Filter{Field: aws.String(field), Type: pricingtypes.FilterTypeTermMatch, Value: aws.String(value)}
	}
	out, err := p.List.GetProducts(ctx, &pricing.GetProductsInput{
		ServiceCode:   aws.String("AmazonEC2"),
		FormatVersion: aws.String("aws_v1"),
		MaxResults:    aws.Int32(10),
		Filters: []pricingtypes.Filter{match("instanceType", typ), match("regionCode", p.Region), match("operatingSystem", "Linux"),
			match("tenancy", "Shared"), match("preInstalledSw", "NA"), match("capacitystatus", "Used")},
	})
	if err != nil {
		return Price{}, fmt.Errorf("get the products of %s in %s: %w", typ, p.Region, err)
	}
	var prices []float64
	for _, doc := range out.PriceList {
		usd, err := hourlyOnDemand(doc)
		if err != nil {
			return Price{}, fmt.Errorf("price of %s in %s: %w", typ, p.Region, err)
		}
		if usd > 0 && !slices.Contains(prices, usd) {
			prices = append(prices, usd)
		}
	}
	switch len(prices) {
	case 0:
		return Price{}, fmt.Errorf("no on-demand price of %s in %s in the Price List", typ, p.Region)
	case 1:
		return Price{USD: prices[0], Source: state.PriceOnDemand}, nil
	}
	return Price{}, fmt.Errorf("the Price List gives %s in %s several prices %v: none is taken", typ, p.Region, prices)
}

// product is the part of a Price List document read here.
type product struct {
	Terms struct {
		OnDemand map[string]struct {
			PriceDimensions map[string]struct {
				Unit         string            `json:"unit"`
				PricePerUnit map[string]string `json:"pricePerUnit"`
			} `json:"priceDimensions"`
		} `json:"OnDemand"`
	} `json:"terms"`
}

// hourlyOnDemand reads a Price List document's hourly on-demand price in USD (0 when it has none).
func hourlyOnDemand(doc string) (float64, error) {
	var p product
	if err := json.Unmarshal([]byte(doc), &p); err != nil {
		return 0, fmt.Errorf("decode a Price List document: %w", err)
	}
	for _, term := range p.Terms.OnDemand {
		for _, dim := range term.PriceDimensions {
			if dim.Unit != "Hrs" {
				continue
			}
			usd, err := strconv.ParseFloat(dim.PricePerUnit["USD"], 64)
			if err != nil {
				return 0, fmt.Errorf("price per unit %q is not a number: %w", dim.PricePerUnit["USD"], err)
			}
			return usd, nil
		}
	}
	return 0, nil
}

func (p *Pricer) log() *slog.Logger {
	if p.Log != nil {
		return p.Log
	}
	return slog.Default()
}
