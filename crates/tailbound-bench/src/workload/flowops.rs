//! The workloads and the flowops each loops over, with filebench's names.

use serde::{Deserialize, Serialize};

/// The workloads filebench ships as `fileserver.f`, `varmail.f` and `webserver.f`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Workload {
    Fileserver,
    Varmail,
    Webserver,
}

impl Workload {
    pub const ALL: [Workload; 3] = [Workload::Fileserver, Workload::Varmail, Workload::Webserver];

    pub fn name(self) -> &'static str {
        match self {
            Workload::Fileserver => "fileserver",
            Workload::Varmail => "varmail",
            Workload::Webserver => "webserver",
        }
    }

    pub fn parse(name: &str) -> Option<Workload> {
        Workload::ALL
            .into_iter()
            .find(|w| w.name().eq_ignore_ascii_case(name))
    }

    /// The flowops one thread loops over, with filebench's names.
    pub fn flowops(self) -> Vec<Flowop> {
        use Step::*;
        let op = |name: &'static str, step: Step| Flowop { name, step };
        match self {
            Workload::Fileserver => vec![
                op("createfile1", Create),
                op("wrtfile1", WriteWhole),
                op("closefile1", Close),
                op("openfile1", Open),
                op("appendfilerand1", Append),
                op("closefile2", Close),
                op("openfile2", Open),
                op("readfile1", ReadWhole),
                op("closefile3", Close),
                op("deletefile1", Delete),
                op("statfile1", Stat),
            ],
            Workload::Varmail => vec![
                op("deletefile1", Delete),
                op("createfile2", Create),
                op("appendfilerand2", Append),
                op("fsyncfile2", Fsync),
                op("closefile2", Close),
                op("openfile3", Open),
                op("readfile3", ReadWhole),
                op("appendfilerand3", Append),
                op("fsyncfile3", Fsync),
                op("closefile3", Close),
                op("openfile4", Open),
                op("readfile4", ReadWhole),
                op("closefile4", Close),
            ],
            Workload::Webserver => {
                const OPEN: [&str; 10] = [
                    "openfile1",
                    "openfile2",
                    "openfile3",
                    "openfile4",
                    "openfile5",
                    "openfile6",
                    "openfile7",
                    "openfile8",
                    "openfile9",
                    "openfile10",
                ];
                const READ: [&str; 10] = [
                    "readfile1",
                    "readfile2",
                    "readfile3",
                    "readfile4",
                    "readfile5",
                    "readfile6",
                    "readfile7",
                    "readfile8",
                    "readfile9",
                    "readfile10",
                ];
                const CLOSE: [&str; 10] = [
                    "closefile1",
                    "closefile2",
                    "closefile3",
                    "closefile4",
                    "closefile5",
                    "closefile6",
                    "closefile7",
                    "closefile8",
                    "closefile9",
                    "closefile10",
                ];
                let mut ops = Vec::new();
                for i in 0..10 {
                    ops.push(op(OPEN[i], Open));
                    ops.push(op(READ[i], ReadWhole));
                    ops.push(op(CLOSE[i], Close));
                }
                ops.push(op("appendlog", AppendLog));
                ops
            }
        }
    }
}

/// What a flowop does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Create,
    WriteWhole,
    Open,
    Append,
    ReadWhole,
    Fsync,
    Close,
    Delete,
    Stat,
    /// Appends to the thread's shared log file (webserver).
    AppendLog,
}

/// One named step of a workload's loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flowop {
    pub name: &'static str,
    pub step: Step,
}
