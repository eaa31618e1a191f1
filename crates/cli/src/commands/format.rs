//! Text shared by ls and stat: mode strings, owners, dates (UTC), columns.

use std::time::{SystemTime, UNIX_EPOCH};
use txnfs_client::{Attributes, FileKind, Time};

pub fn type_char(k: Option<FileKind>) -> char {
    match k {
        Some(FileKind::Directory) => 'd',
        Some(FileKind::Symlink) => 'l',
        Some(FileKind::Block) => 'b',
        Some(FileKind::Char) => 'c',
        Some(FileKind::Socket) => 's',
        Some(FileKind::Fifo) => 'p',
        Some(FileKind::Regular) => '-',
        Some(FileKind::Other) | None => '?',
    }
}

pub fn type_name(k: Option<FileKind>, size: u64) -> &'static str {
    match k {
        Some(FileKind::Directory) => "directory",
        Some(FileKind::Symlink) => "symbolic link",
        Some(FileKind::Block) => "block special file",
        Some(FileKind::Char) => "character special file",
        Some(FileKind::Socket) => "socket",
        Some(FileKind::Fifo) => "fifo",
        Some(FileKind::Regular) if size == 0 => "regular empty file",
        Some(FileKind::Regular) => "regular file",
        Some(FileKind::Other) | None => "unknown",
    }
}

/// "drwxr-xr-x" (with s/S, t/T for setuid, setgid, sticky).
pub fn mode_string(kind: Option<FileKind>, mode: u32) -> String {
    let mut s = String::with_capacity(10);
    s.push(type_char(kind));
    let bit = |m: u32, c: char| if mode & m != 0 { c } else { '-' };
    let special = |x: bool, set: bool, lower: char, upper: char| match (set, x) {
        (true, true) => lower,
        (true, false) => upper,
        (false, true) => 'x',
        (false, false) => '-',
    };
    s.push(bit(0o400, 'r'));
    s.push(bit(0o200, 'w'));
    s.push(special(mode & 0o100 != 0, mode & 0o4000 != 0, 's', 'S'));
    s.push(bit(0o040, 'r'));
    s.push(bit(0o020, 'w'));
    s.push(special(mode & 0o010 != 0, mode & 0o2000 != 0, 's', 'S'));
    s.push(bit(0o004, 'r'));
    s.push(bit(0o002, 'w'));
    s.push(special(mode & 0o001 != 0, mode & 0o1000 != 0, 't', 'T'));
    s
}

/// Owner or group as the server sent it ("1000", "root", "user@domain" -> "user").
pub fn principal(p: &Option<bytes::Bytes>) -> String {
    match p {
        None => "?".into(),
        Some(b) => {
            let s = String::from_utf8_lossy(b);
            s.split('@').next().unwrap_or("").to_string()
        }
    }
}

/// (year, month 1-12, day) of a day count since 1970-01-01 (proleptic Gregorian).
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

struct Broken {
    year: i64,
    month: u32,
    day: u32,
    hour: u32,
    min: u32,
    sec: u32,
}

fn broken(sec: i64) -> Broken {
    let days = sec.div_euclid(86_400);
    let rem = sec.rem_euclid(86_400) as u32;
    let (year, month, day) = civil_from_days(days);
    Broken {
        year,
        month,
        day,
        hour: rem / 3600,
        min: rem / 60 % 60,
        sec: rem % 60,
    }
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// ls -l's date (UTC): "Jan  2 15:04" within six months, "Jan  2  2006" otherwise.
pub fn ls_time(t: Option<Time>) -> String {
    let Some(t) = t else {
        return "           ?".into();
    };
    let b = broken(t.sec);
    let mon = MONTHS[(b.month.clamp(1, 12) - 1) as usize];
    let age = now() - t.sec;
    if (0..=182 * 86_400).contains(&age) || (-3600..0).contains(&age) {
        format!("{mon} {:>2} {:02}:{:02}", b.day, b.hour, b.min)
    } else {
        format!("{mon} {:>2}  {}", b.day, b.year)
    }
}

/// stat's date: "2006-01-02 15:04:05.123456789 +0000".
pub fn full_time(t: Option<Time>) -> String {
    let Some(t) = t else {
        return "-".into();
    };
    let b = broken(t.sec);
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02}.{:09} +0000",
        b.year, b.month, b.day, b.hour, b.min, b.sec, t.nsec
    )
}

/// One `ls -l` row's fields, before alignment.
pub struct LongRow {
    pub mode: String,
    pub nlink: String,
    pub owner: String,
    pub group: String,
    pub size: String,
    pub time: String,
    pub name: String,
}

pub fn long_row(a: &Attributes, name: String) -> LongRow {
    LongRow {
        mode: mode_string(a.kind, a.mode.unwrap_or(0)),
        nlink: a.nlink.map_or("?".into(), |n| n.to_string()),
        owner: principal(&a.owner),
        group: principal(&a.group),
        size: match (a.kind, a.rdev) {
            (Some(FileKind::Block | FileKind::Char), Some((ma, mi))) => format!("{ma}, {mi}"),
            _ => a.size.map_or("?".into(), |s| s.to_string()),
        },
        time: ls_time(a.mtime),
        name,
    }
}

/// Align rows like coreutils: numbers right, names left, one space between columns.
pub fn render_long(rows: &[LongRow], out: &mut String) {
    let w = |f: &dyn Fn(&LongRow) -> usize| rows.iter().map(f).max().unwrap_or(0);
    let (wl, wo, wg, ws) = (
        w(&|r| r.nlink.len()),
        w(&|r| r.owner.len()),
        w(&|r| r.group.len()),
        w(&|r| r.size.len()),
    );
    for r in rows {
        out.push_str(&format!(
            "{} {:>wl$} {:<wo$} {:<wg$} {:>ws$} {} {}\n",
            r.mode, r.nlink, r.owner, r.group, r.size, r.time, r.name
        ));
    }
}

/// Names in columns, filled top to bottom, for a terminal `width` wide.
pub fn render_columns(names: &[String], width: usize, out: &mut String) {
    if names.is_empty() {
        return;
    }
    let lens: Vec<usize> = names.iter().map(|n| n.chars().count()).collect();
    let n = names.len();
    let mut rows = n;
    for r in 1..=n {
        let cols = n.div_ceil(r);
        let total: usize = (0..cols)
            .map(|c| {
                let w = (c * r..((c + 1) * r).min(n))
                    .map(|i| lens[i])
                    .max()
                    .unwrap_or(0);
                if c + 1 < cols {
                    w + 2
                } else {
                    w
                }
            })
            .sum();
        if total <= width {
            rows = r;
            break;
        }
    }
    let cols = n.div_ceil(rows);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            (c * rows..((c + 1) * rows).min(n))
                .map(|i| lens[i])
                .max()
                .unwrap_or(0)
        })
        .collect();
    for r in 0..rows {
        let mut line = String::new();
        for (c, w) in widths.iter().enumerate() {
            let i = c * rows + r;
            if i >= n {
                break;
            }
            line.push_str(&names[i]);
            if c + 1 < cols && (c + 1) * rows + r < n {
                line.push_str(&" ".repeat(w - lens[i] + 2));
            }
        }
        out.push_str(&line);
        out.push('\n');
    }
}

/// Terminal width from $COLUMNS (80 if unset).
pub fn term_width() -> usize {
    std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.parse().ok())
        .filter(|&c: &usize| c > 0)
        .unwrap_or(80)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_and_dates() {
        assert_eq!(mode_string(Some(FileKind::Directory), 0o755), "drwxr-xr-x");
        assert_eq!(mode_string(Some(FileKind::Regular), 0o4644), "-rwSr--r--");
        assert_eq!(mode_string(Some(FileKind::Directory), 0o1777), "drwxrwxrwt");
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_723), (2024, 1, 1));
        assert_eq!(
            full_time(Some(Time {
                sec: 951_782_400,
                nsec: 5
            })),
            "2000-02-29 00:00:00.000000005 +0000"
        );
        assert_eq!(
            ls_time(Some(Time {
                sec: 951_782_400,
                nsec: 0
            })),
            "Feb 29  2000"
        );
        let mut s = String::new();
        render_columns(
            &["a".into(), "bb".into(), "c".into(), "dddd".into()],
            9,
            &mut s,
        );
        assert_eq!(s, "a   c\nbb  dddd\n");
    }
}
