//! Deterministic test data shared by the end-to-end tests, the benchmarks and
//! the CLI tests: one xorshift generator, one file-contents pattern and one
//! tree generator, so that every tool builds the same bytes and the same
//! trees from the same seeds.

use std::path::Path;

/// Deterministic xorshift64 generator (random offsets and sizes that are the
/// same for every server and every run).
#[derive(Clone, Debug)]
pub struct XorShift(u64);

impl XorShift {
    pub fn new(seed: u64) -> XorShift {
        XorShift(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
}

/// Deterministic file contents: `len` bytes of a stream seeded with `seed`.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut rng = XorShift::new(seed);
    (0..len).map(|_| (rng.next_u64() >> 24) as u8).collect()
}

/// A generated tree: directories (relative paths, parents before children,
/// "" is the root) and files (relative path, size). File `j` holds
/// [`TreeShape::contents`]`(j)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TreeShape {
    pub dirs: Vec<String>,
    pub files: Vec<(String, u64)>,
}

impl TreeShape {
    /// `dirs` directories as a random recursive tree (each new directory
    /// under a uniformly chosen earlier one: shallow and bushy, like a source
    /// tree), `files` files spread uniformly with sizes exponentially
    /// distributed around `mean` (1 byte to 1 MiB).
    pub fn random(dirs: u64, files: u64, mean: u64, seed: u64) -> TreeShape {
        let mut rng = XorShift::new(seed);
        let mut d = vec![String::new()];
        for k in 1..dirs.max(1) {
            let parent = d[(rng.next_u64() % k) as usize].clone();
            d.push(join(&parent, &format!("d{k}")));
        }
        let f = (0..files)
            .map(|j| {
                let dir = &d[(rng.next_u64() % d.len() as u64) as usize];
                let u = ((rng.next_u64() >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
                let size = ((-u.ln()) * mean as f64).clamp(1.0, (1 << 20) as f64) as u64;
                (join(dir, &format!("f{j}.c")), size)
            })
            .collect();
        TreeShape { dirs: d, files: f }
    }

    /// A regular tree: `top` directories `dA`, each with `sub` directories
    /// `dA/sB`, each with `per_dir` files `fF.dat`; file n has
    /// `(n * 137) % max_size` bytes (so sizes vary, some files are empty).
    pub fn grid(top: u64, sub: u64, per_dir: u64, max_size: u64) -> TreeShape {
        let mut dirs = vec![String::new()];
        let mut files = Vec::new();
        for a in 0..top {
            dirs.push(format!("d{a}"));
            for b in 0..sub {
                let d = format!("d{a}/s{b}");
                for f in 0..per_dir {
                    let n = files.len() as u64;
                    files.push((format!("{d}/f{f}.dat"), (n * 137) % max_size.max(1)));
                }
                dirs.push(d);
            }
        }
        TreeShape { dirs, files }
    }

    pub fn bytes(&self) -> u64 {
        self.files.iter().map(|f| f.1).sum()
    }

    /// The contents of file `j`.
    pub fn contents(&self, j: usize) -> Vec<u8> {
        pattern(j as u64, self.files.get(j).map_or(0, |f| f.1) as usize)
    }

    /// Create the tree below the host directory `root` (which may exist).
    pub fn write_local(&self, root: &Path) -> std::io::Result<()> {
        for d in &self.dirs {
            std::fs::create_dir_all(root.join(d))?;
        }
        for (j, (p, _)) in self.files.iter().enumerate() {
            std::fs::write(root.join(p), self.contents(j))?;
        }
        Ok(())
    }
}

/// `a/b`, or `b` when `a` is empty (tree-relative paths).
pub fn join(a: &str, b: &str) -> String {
    if a.is_empty() {
        b.to_string()
    } else if b.is_empty() {
        a.to_string()
    } else {
        format!("{a}/{b}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_is_deterministic_and_seeded() {
        assert_eq!(pattern(1, 64), pattern(1, 64));
        assert_ne!(pattern(1, 64), pattern(2, 64));
        assert_eq!(pattern(3, 10).len(), 10);
        // Known first bytes: the stream must not change under the tools' feet.
        assert_eq!(pattern(0, 4), pattern(0, 8)[..4]);
    }

    #[test]
    fn kernel_like_random_shape() {
        let s = TreeShape::random(4000, 60_000, 15 << 10, 42);
        assert_eq!(s.dirs.len(), 4000);
        assert_eq!(s.files.len(), 60_000);
        let mean = s.bytes() / 60_000;
        assert!((12 << 10..=18 << 10).contains(&mean), "mean {mean}");
        let depth = s.dirs.iter().map(|d| d.matches('/').count()).max().unwrap();
        assert!((3..=30).contains(&depth), "depth {depth}");
        let mut seen = std::collections::HashSet::new();
        for d in &s.dirs {
            if let Some((p, _)) = d.rsplit_once('/') {
                assert!(seen.contains(p), "{d} before its parent");
            }
            seen.insert(d.clone());
        }
    }

    #[test]
    fn grid_shape_and_local_copy() {
        let s = TreeShape::grid(10, 3, 10, 4096);
        assert_eq!(s.files.len(), 300);
        assert_eq!(s.dirs.len(), 1 + 10 + 30);
        assert_eq!(s.files[1], ("d0/s0/f1.dat".to_string(), 137));
        let dir = tempfile::tempdir().unwrap();
        s.write_local(dir.path()).unwrap();
        assert_eq!(
            std::fs::read(dir.path().join("d9/s2/f9.dat")).unwrap(),
            s.contents(299)
        );
    }
}
