//! A Zipf-distributed sampler over ranks `1..=n`.
//!
//! Rank `k` is drawn with probability proportional to `1 / k^skew`: rank 1 is
//! the most popular, and a larger skew concentrates the draws on fewer ranks
//! (0 is uniform; YCSB's default is 0.99). Sampling is rejection-inversion
//! (W. Hörmann and G. Derflinger, "Rejection-inversion to generate variates
//! from monotone discrete distributions", 1996), as in `rand_distr::Zipf`: it
//! needs O(1) memory and O(1) expected time whatever `n`, so a key space of
//! billions costs nothing to set up, unlike the table-driven or zeta-summing
//! generators.
//!
//! A [`Zipf`] is immutable and `Copy`; each connection holds its own copy and
//! its own random number generator.

use rand::Rng;

/// The parameters of a Zipf distribution, precomputed once.
#[derive(Debug, Clone, Copy)]
pub struct Zipf {
    /// Number of ranks, as a float (exact for every count we accept).
    ranks: f64,
    skew: f64,
    /// `H(n)`: the integral of the hat function up to `n`, scaled so that
    /// `inverse_cdf(1) = n`.
    total: f64,
    /// `1 / (1 - skew)`, or 0 when `skew == 1`.
    inverse_one_minus_skew: f64,
}

impl Zipf {
    /// A distribution over `1..=ranks` with the given skew.
    ///
    /// Preconditions (checked by option validation): `ranks >= 1` and `skew`
    /// finite and non-negative.
    pub fn new(ranks: u64, skew: f64) -> Self {
        assert!(ranks >= 1, "a Zipf distribution needs at least one rank");
        assert!(skew.is_finite(), "the Zipf skew must be finite");
        assert!(skew >= 0.0, "the Zipf skew must not be negative");
        let ranks = ranks as f64;
        let (total, inverse_one_minus_skew) = if skew == 1.0 {
            (1.0 + ranks.ln(), 0.0)
        } else {
            let q = 1.0 / (1.0 - skew);
            ((ranks.powf(1.0 - skew) - skew) * q, q)
        };
        Zipf {
            ranks,
            skew,
            total,
            inverse_one_minus_skew,
        }
    }

    /// Draws a rank in `1..=n`.
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> u64 {
        loop {
            let hat = self.inverse_cdf(rng.gen::<f64>());
            let rank = (hat + 1.0).floor();
            let mut ratio = rank.powf(-self.skew);
            if rank > 1.0 {
                ratio *= hat.powf(self.skew);
            }
            if rng.gen::<f64>() < ratio {
                // Rounding can push the float a hair past the last rank.
                return (rank as u64).clamp(1, self.ranks as u64);
            }
        }
    }

    fn inverse_cdf(&self, p: f64) -> f64 {
        let scaled = p * self.total;
        if scaled <= 1.0 {
            scaled
        } else if self.skew == 1.0 {
            (scaled - 1.0).exp()
        } else {
            (scaled * (1.0 - self.skew) + self.skew).powf(self.inverse_one_minus_skew)
        }
    }
}

#[cfg(test)]
#[allow(
    clippy::indexing_slicing,
    reason = "tests index vectors of known length"
)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    fn counts(ranks: u64, skew: f64, draws: usize) -> Vec<u64> {
        let zipf = Zipf::new(ranks, skew);
        let mut rng = SmallRng::seed_from_u64(7);
        let mut counts = vec![0u64; ranks as usize];
        for _ in 0..draws {
            let rank = zipf.sample(&mut rng);
            assert!((1..=ranks).contains(&rank), "rank {rank} out of range");
            counts[(rank - 1) as usize] += 1;
        }
        counts
    }

    #[test]
    fn most_popular_rank_is_drawn_far_more_often_than_the_median_one() {
        let counts = counts(1000, 0.99, 200_000);
        let top = counts[0];
        assert_eq!(Some(&top), counts.iter().max());
        let mut sorted = counts.clone();
        sorted.sort_unstable();
        let median = sorted[sorted.len() / 2].max(1);
        // Expected ratio is about 500^0.99 ≈ 470; leave room for noise.
        assert!(top > 100 * median, "top {top} vs median {median}");
    }

    #[test]
    fn skew_one_is_handled() {
        let counts = counts(100, 1.0, 100_000);
        // P(1) / P(2) = 2 under skew 1.
        let ratio = counts[0] as f64 / counts[1] as f64;
        assert!((1.8..2.2).contains(&ratio), "ratio {ratio}");
    }

    #[test]
    fn skew_zero_is_uniform() {
        let counts = counts(10, 0.0, 100_000);
        for count in counts {
            assert!((9_000..11_000).contains(&count), "count {count}");
        }
    }

    #[test]
    fn a_single_rank_is_always_drawn() {
        assert_eq!(counts(1, 0.99, 1000), vec![1000]);
    }
}
