//! The internal node (`vargr commnode`): joins its parent, starts its sub-tree, then
//! forwards, filters and routes until shut down, or orphaned with nobody to adopt it
//! (see [`crate::recovery`]).

use std::sync::Arc;
use std::time::Duration;

use vargr_filter::Registry;
use vargr_net::launch::Launcher;
use vargr_net::Reactor;
use vargr_wire::FrameKind;

use crate::engine::Engine;
use crate::router::Router;
use crate::spawn::{self, start_children, Bootstrap, ChildHandle, Spawner};
use crate::trace::TraceDump;
use crate::TbonError;

/// Builds the filter registry every node uses: built-ins plus the configured plugins.
pub fn registry(plugins: &[String]) -> Result<Arc<Registry>, TbonError> {
    let mut r = Registry::with_builtins();
    for p in plugins {
        r.load_plugin(std::path::Path::new(p))
            .map_err(|e| TbonError::Config(format!("loading filter plugin {p}: {e}")))?;
    }
    Ok(Arc::new(r))
}

/// Runs one commnode to completion.
pub fn run(boot: Bootstrap, spawner: Spawner) -> Result<(), TbonError> {
    let (mut conn, msg) = spawn::join_parent(&boot, Duration::from_secs(30))?;
    spawn::untie_if_adoptable(&msg);
    let me = boot.node;
    crate::trace::label_thread(me, "commnode");
    let config = msg.config.clone();
    let spawner = match spawner {
        Spawner::Processes(_) => Spawner::Processes(match &config.remote_template {
            Some(t) => Launcher::remote(t)?,
            None => Launcher::Local,
        }),
        s => s,
    };
    let mut reactor = Reactor::new().map_err(|e| TbonError::Startup(format!("node {me}: {e}")))?;
    let started = registry(&config.plugins).and_then(|reg| {
        let started = start_children(
            me,
            &msg.topology,
            &config,
            &boot.secret,
            &spawner,
            &mut reactor,
            &msg.ancestors,
        )?;
        Ok((reg, started))
    });
    let (registry, started) = match started {
        Ok(v) => v,
        Err(e) => {
            let f = vargr_wire::Frame::new(FrameKind::Refused, 0, 0, e.to_string());
            let _ = conn.write_frame(&f);
            return Err(e);
        }
    };
    let link = conn
        .into_link("parent", config.max_frame)
        .map_err(|e| TbonError::Startup(format!("node {me}: {e}")))?;
    let me_host = &msg.topology.root().host;
    let parent_id = msg.topology.root().parent.unwrap_or(0);
    let stages = config
        .link_stages
        .chain(
            me_host,
            &msg.parent_host,
            me,
            spawn::seed(me, parent_id),
            config.max_frame,
        )
        .map_err(|e| TbonError::Startup(format!("node {me}: {e}")))?;
    let parent = reactor
        .add(link.with_stages(stages))
        .map_err(|e| TbonError::Startup(e.to_string()))?;
    let crate::spawn::Started {
        children,
        handles,
        adopter,
    } = started;
    let mut backends: Vec<u32> = children
        .iter()
        .flat_map(|c| c.backends.iter().copied())
        .collect();
    backends.sort_unstable();
    crate::trace::send_recorded(
        &mut reactor,
        parent,
        spawn::ready_frame(me, backends),
        parent_id,
    );
    reactor.flush_all();

    let host = msg.topology.root().host.clone();
    let router = Router::new(me, host, None, registry)
        .with_parent(parent, parent_id)
        .with_children(children)
        .with_heartbeat(
            Duration::from_millis(config.heartbeat_ms),
            Duration::from_millis(config.heartbeat_timeout_ms),
        )
        .with_recovery(
            config.recovery,
            msg.ancestors.clone(),
            adopter.as_ref().map(|a| a.me.clone()),
        )
        .with_clock_offset(&config.clock_offsets_ns);
    let engine = Engine::new(router, reactor, config.queue_limit);
    if config.recovery == crate::Recovery::Ancestor {
        let mut st = engine.lock();
        st.adopter = adopter;
        st.rejoin = Some(crate::engine::Rejoin {
            secret: boot.secret.clone(),
            max_frame: config.max_frame,
        });
    }

    // Loop until our parent tells us to stop (and our children confirmed) or vanishes.
    engine.wait_for(None, |st| {
        let r = &st.router;
        if r.is_closed() {
            return Some(());
        }
        (r.is_shutting_down() && r.children_done()).then_some(())
    });
    // Before confirming, so the front-end's shutdown returns with every file written.
    if !crate::trace::in_process() {
        if let Some(d) = TraceDump::configured(config.trace_dir.as_deref(), me, "commnode".into()) {
            d.write_or_log();
        }
    }
    let orphaned = engine.with_router(|r, out| r.leave(out));
    if orphaned {
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        engine.wait_for(Some(deadline), |st| st.router.children_done().then_some(()));
    }
    // Give the ShutdownDone a moment to leave before the socket closes with the process.
    engine.wait_for(
        Some(std::time::Instant::now() + Duration::from_millis(5)),
        |_| None::<()>,
    );
    // With recovery, a child lost here may live on under another parent (this node was
    // stopped, say, and its children were adopted): let it be, do not kill it.
    let handles = match config.recovery {
        crate::Recovery::Off => handles,
        crate::Recovery::Ancestor => {
            let lost = engine.lock().router.lost_children();
            handles
                .into_iter()
                .filter(|h| !lost.contains(&h.node()))
                .collect()
        }
    };
    finish_children(handles);
    Ok(())
}

/// Reaps child processes and threads, killing any that do not exit promptly.
pub fn finish_children(handles: Vec<ChildHandle>) {
    let ths: Vec<_> = handles
        .into_iter()
        .map(|h| std::thread::spawn(move || h.finish(Duration::from_secs(2))))
        .collect();
    for t in ths {
        let _ = t.join();
    }
}
