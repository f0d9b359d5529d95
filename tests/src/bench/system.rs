//! What the benchmarks read from Linux `/proc` and the kernel: this process's
//! resident memory (`/proc/self/status`), the CPU time it has used (all its
//! threads, from `getrusage`), the CPU model (`/proc/cpuinfo`) and the load
//! average (`/proc/loadavg`), so every printed figure carries the machine and
//! the noise it was measured under. Parsing is pure; reading is a thin wrapper.

use std::io;
use std::time::Duration;

/// This process's memory, from `/proc/self/status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Memory {
    /// `VmRSS`: resident set size now, in KiB.
    pub rss_kib: u64,
    /// `VmHWM`: peak resident set size so far, in KiB.
    pub peak_kib: u64,
}

impl Memory {
    /// Reads this process's memory now.
    pub fn now() -> io::Result<Self> {
        let status = std::fs::read_to_string("/proc/self/status")?;
        Self::parse(&status).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                "/proc/self/status has no VmRSS or VmHWM line",
            )
        })
    }

    /// Parses the text of a `/proc/<pid>/status` file.
    pub fn parse(status: &str) -> Option<Self> {
        Some(Self {
            rss_kib: status_kib(status, "VmRSS")?,
            peak_kib: status_kib(status, "VmHWM")?,
        })
    }

    /// Resident set size in MiB.
    pub fn rss_mib(&self) -> f64 {
        kib_to_mib(self.rss_kib)
    }
}

/// CPU time (user + system) used so far by every thread of this process,
/// with microsecond resolution (`getrusage(RUSAGE_SELF)`).
pub fn process_cpu_time() -> io::Result<Duration> {
    // SAFETY: `rusage` is a plain C struct for which all-zero bytes are valid.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: the pointer is to a live, writable local of the right type.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(timeval(usage.ru_utime) + timeval(usage.ru_stime))
}

/// A `timeval` as a duration; negative fields (never set by the kernel) count
/// as zero.
fn timeval(tv: libc::timeval) -> Duration {
    let secs = u64::try_from(tv.tv_sec).unwrap_or(0);
    let micros = u64::try_from(tv.tv_usec).unwrap_or(0);
    Duration::from_secs(secs) + Duration::from_micros(micros)
}

/// KiB to MiB.
pub fn kib_to_mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// The value of a `Name:   1234 kB` line of a status file, in KiB.
pub fn status_kib(status: &str, field: &str) -> Option<u64> {
    status.lines().find_map(|line| {
        let (name, rest) = line.split_once(':')?;
        if name != field {
            return None;
        }
        let mut words = rest.split_whitespace();
        let value = words.next()?.parse().ok()?;
        match words.next() {
            Some("kB") => Some(value),
            _ => None,
        }
    })
}

/// The first `model name` of a `/proc/cpuinfo` text.
pub fn cpu_model(cpuinfo: &str) -> Option<String> {
    cpuinfo.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        (name.trim() == "model name").then(|| value.trim().to_string())
    })
}

/// One line describing the machine: logical CPUs, CPU model and the load
/// averages over 1, 5 and 15 minutes (unknown parts say so).
pub fn machine_line() -> String {
    let cpus = std::thread::available_parallelism()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| cpu_model(&text))
        .unwrap_or_else(|| "unknown CPU".into());
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|| "?".into());
    format!("machine: {cpus} CPUs, {model}; load average {load}")
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATUS: &str = "Name:\tbench\nVmPeak:\t  400000 kB\nVmHWM:\t   20480 kB\n\
                          VmRSS:\t   10240 kB\nThreads:\t3\n";

    #[test]
    fn reads_rss_and_peak() {
        let memory = Memory::parse(STATUS).unwrap();
        assert_eq!(memory.rss_kib, 10_240);
        assert_eq!(memory.peak_kib, 20_480);
        assert_eq!(memory.rss_mib(), 10.0);
    }

    #[test]
    fn missing_or_odd_fields_are_none() {
        assert_eq!(status_kib(STATUS, "VmSwap"), None);
        assert_eq!(status_kib(STATUS, "Threads"), None, "no unit");
        assert_eq!(status_kib("VmRSS: lots kB", "VmRSS"), None);
        assert_eq!(Memory::parse("VmRSS: 1 kB\n"), None);
    }

    #[test]
    fn cpu_time_grows_with_work() {
        let before = process_cpu_time().unwrap();
        let started = std::time::Instant::now();
        let mut x = 0u64;
        while started.elapsed() < Duration::from_millis(30) {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        assert!(process_cpu_time().unwrap() > before);
        assert_eq!(
            timeval(libc::timeval {
                tv_sec: 2,
                tv_usec: 500
            }),
            Duration::from_micros(2_000_500)
        );
        assert_eq!(
            timeval(libc::timeval {
                tv_sec: -1,
                tv_usec: -1
            }),
            Duration::ZERO
        );
    }

    #[test]
    fn finds_the_cpu_model() {
        let cpuinfo = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC\n\n\
                       processor\t: 1\nmodel name\t: AMD EPYC\n";
        assert_eq!(cpu_model(cpuinfo).as_deref(), Some("AMD EPYC"));
        assert_eq!(cpu_model("processor : 0\n"), None);
    }
}
