//! Where changes are made: on the Raft leader, one at a time. A server
//! asked for a change passes it to the leader (waiting out an election),
//! and applies what it committed before it answers.

use super::*;
use crate::error::Error;

impl Daemon {
    /// `change_anywhere` for a task running in the background. Boxed: a
    /// change may lead back to the task (the compiler cannot see through
    /// the cycle).
    pub(super) fn change_boxed(
        self: &Arc<Self>,
        req: Request,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<String, Error>> + Send>> {
        Box::pin(self.clone().change_anywhere(req))
    }

    /// Makes a change on the leader: here, or passed to it. While no
    /// leader answers (one just died: the others elect another within
    /// `ELECTION_WAIT`), it waits for one.
    pub(super) async fn change_anywhere(self: Arc<Self>, req: Request) -> Result<String, Error> {
        let deadline = tokio::time::Instant::now() + ELECTION_WAIT;
        loop {
            if self.consensus.is_leader() {
                return self.change_here(req).await;
            }
            let waited = tokio::time::Instant::now() > deadline;
            // No leader reached, and none to be elected on this side.
            let cut_off = || {
                self.cut_off().then(|| {
                    format!(
                        "{} cannot reach a majority of the pool's voters: no change was made. {}",
                        self.me.host,
                        self.unreachable_voters()
                    )
                })
            };
            let Some((_, leader)) = self.consensus.leader() else {
                if let Some(e) = cut_off() {
                    return Err(Error::unavailable(e));
                }
                if waited {
                    return Err(Error::unavailable(format!(
                        "{} knows no leader of the pool (no election won within {} s: this server is cut off, or most voters are down): no change was made. {}",
                        self.me.host,
                        ELECTION_WAIT.as_secs(),
                        self.unreachable_voters()
                    )));
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
                continue;
            };
            match rpc::call(&leader.mgmt, &Request::Leader(Box::new(req.clone()))).await {
                Ok(Response::Committed { msg, index }) => {
                    self.consensus.applied_at_least(index).await;
                    self.refresh();
                    return Ok(msg);
                }
                Ok(Response::Err(e)) if e.message == NOT_LEADER && !waited => {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                }
                Ok(Response::Err(e)) => return Err(e),
                Ok(other) => return Err(format!("unexpected answer {other:?}").into()),
                Err(_) if !waited => match cut_off() {
                    Some(e) => return Err(Error::unavailable(e)),
                    None => tokio::time::sleep(Duration::from_millis(300)).await,
                },
                Err(e) => {
                    return Err(Error::unreachable(
                        &leader.host,
                        format!(
                            "cannot reach the leader of the pool ({}): {e}; no change was made. {}",
                            leader.host,
                            self.unreachable_voters()
                        ),
                    ))
                }
            }
        }
    }

    /// Makes a change here, the leader, one at a time.
    pub(super) async fn change_here(self: &Arc<Self>, req: Request) -> Result<String, Error> {
        let t0 = std::time::Instant::now();
        let _g = self.op_lock.lock().await;
        let locked = t0.elapsed().as_millis();
        let what = format!("{req:?}");
        if let Err(e) = self.consensus.may_write().await {
            return Err(self.refusal(e));
        }
        match self.change(req).await {
            Ok(msg) => {
                let ms = t0.elapsed().as_millis();
                tracing::info!("done in {ms} ms ({locked} ms waiting for the change lock): {what}");
                Ok(msg)
            }
            Err(e) => {
                tracing::warn!("refused: {what}: {e}");
                Err(e)
            }
        }
    }

    /// Applies here what the leader has committed (for an up-to-date read).
    pub(super) async fn catch_up(&self) -> Result<(), Error> {
        let index = if self.consensus.is_leader() {
            self.consensus.read_index().await?
        } else {
            let Some((_, leader)) = self.consensus.leader() else {
                return Err(Error::unavailable(format!(
                    "{} knows no leader of the pool: no up-to-date answer. {}",
                    self.me.host,
                    self.unreachable_voters()
                )));
            };
            match rpc::call(&leader.mgmt, &Request::ReadIndex).await? {
                Response::Index(i) => i,
                Response::Err(e) => return Err(e),
                other => return Err(format!("unexpected answer {other:?}").into()),
            }
        };
        if !self.consensus.applied_at_least(index).await {
            return Err(Error::unavailable(format!(
                "{} has not caught up with the leader yet; try again",
                self.me.host
            )));
        }
        self.refresh();
        Ok(())
    }
}

pub(super) const NOT_LEADER: &str = "not the leader of the pool";
/// How long a change waits for a leader to be elected (Raft's election
/// timeout is 3 to 6 s, and a split vote takes another round).
const ELECTION_WAIT: Duration = Duration::from_secs(20);
