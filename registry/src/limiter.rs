//! Uploads per client address: a token bucket per address, in memory only
//! (never written anywhere). An IPv6 client counts by its /64, the block one
//! host usually holds.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Addresses tracked before full buckets are forgotten.
const PRUNE_AT: usize = 10_000;
/// Addresses tracked at most; past this (after forgetting full buckets) a new
/// address waits as if its bucket were empty.
const MAX_TRACKED: usize = 100_000;

struct Bucket {
    tokens: f64,
    at: Instant,
}

/// Allows `per_minute` uploads a minute per address, in bursts of up to a
/// minute's worth.
pub struct Limiter {
    per_minute: u32,
    buckets: Mutex<HashMap<IpAddr, Bucket>>,
}

/// The address a client is counted under.
pub fn client_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
    }
}

impl Limiter {
    /// `per_minute` uploads a minute per address; 0: no limit.
    pub fn new(per_minute: u32) -> Limiter {
        Limiter {
            per_minute,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Takes one upload from `ip`'s bucket, or says how long until one is
    /// allowed (whole seconds, at least 1).
    pub fn check(&self, ip: IpAddr, now: Instant) -> Result<(), Duration> {
        if self.per_minute == 0 {
            return Ok(());
        }
        let capacity = f64::from(self.per_minute);
        let rate = capacity / 60.0;
        let full = |b: &Bucket| {
            b.tokens + now.saturating_duration_since(b.at).as_secs_f64() * rate >= capacity
        };
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        let key = client_key(ip);
        if !buckets.contains_key(&key) && buckets.len() >= PRUNE_AT {
            buckets.retain(|_, b| !full(b));
            if buckets.len() >= MAX_TRACKED {
                return Err(Duration::from_secs(60));
            }
        }
        let bucket = buckets.entry(key).or_insert(Bucket {
            tokens: capacity,
            at: now,
        });
        let elapsed = now.saturating_duration_since(bucket.at).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * rate).min(capacity);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else {
            let wait = ((1.0 - bucket.tokens) / rate).ceil().max(1.0);
            Err(Duration::from_secs(wait as u64))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_one_per_interval() {
        let limiter = Limiter::new(6);
        let ip: IpAddr = "192.0.2.1".parse().unwrap();
        let t0 = Instant::now();
        for _ in 0..6 {
            assert!(limiter.check(ip, t0).is_ok());
        }
        assert_eq!(limiter.check(ip, t0), Err(Duration::from_secs(10)));
        // Another address has its own bucket.
        assert!(limiter.check("192.0.2.2".parse().unwrap(), t0).is_ok());
        assert!(limiter.check(ip, t0 + Duration::from_secs(10)).is_ok());
        assert!(limiter.check(ip, t0 + Duration::from_secs(11)).is_err());
    }

    #[test]
    fn ipv6_counts_by_its_64_and_mapped_v4_as_v4() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:bbbb::2".parse().unwrap();
        assert_eq!(client_key(a), client_key(b));
        let mapped: IpAddr = "::ffff:192.0.2.7".parse().unwrap();
        assert_eq!(client_key(mapped), "192.0.2.7".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn zero_is_no_limit() {
        let limiter = Limiter::new(0);
        let ip: IpAddr = "192.0.2.1".parse().unwrap();
        for _ in 0..1000 {
            assert!(limiter.check(ip, Instant::now()).is_ok());
        }
    }
}
