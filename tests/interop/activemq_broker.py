"""Run a real Apache ActiveMQ 5.17 broker (Debian's ``activemq`` package) for interop tests
and the head-to-head benchmark: generate ``activemq.xml``, start, wait until it serves, stop.

Install: ``apt-get install -y --no-install-recommends activemq libpostgresql-jdbc-java
libcommons-dbcp2-java libjaxb-api-java`` (the package ships no PostgreSQL driver, no DBCP and,
on Java 17, nothing for the XID encoding, so they go on ``-Dactivemq.classpath``).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

HOME = Path(os.environ.get("ACTIVEMQ_HOME", "/usr/share/activemq"))
JARS = [
    Path("/usr/share/java") / j
    for j in ("postgresql.jar", "commons-dbcp2.jar", "commons-pool2.jar", "jaxb-api.jar")
]
PACKAGES = "activemq libpostgresql-jdbc-java libcommons-dbcp2-java libjaxb-api-java"

JAVA_FLAGS = [
    "--add-reads=java.xml=java.logging",
    *[
        f"--add-opens={m}=ALL-UNNAMED"
        for m in (
            "java.base/java.security",
            "java.base/java.net",
            "java.base/java.lang",
            "java.base/java.util",
            "java.naming/javax.naming.spi",
            "java.rmi/sun.rmi.transport.tcp",
            "java.base/java.util.concurrent",
            "java.base/java.util.concurrent.atomic",
        )
    ],
    *[
        f"--add-exports={m}=ALL-UNNAMED"
        for m in (
            "java.base/sun.net.www.protocol.http",
            "java.base/sun.net.www.protocol.https",
            "java.base/sun.net.www.protocol.jar",
            "jdk.xml.dom/org.w3c.dom.html",
            "jdk.naming.rmi/com.sun.jndi.url.rmi",
        )
    ],
]


class ActiveMQMissingError(RuntimeError):
    """The ActiveMQ package (or Java, or a jar it needs) is not installed."""


def missing_parts() -> list[str]:
    """What is missing to run ActiveMQ here (empty when everything is installed)."""
    missing = [str(p) for p in [HOME / "bin" / "activemq.jar", *JARS] if not p.exists()]
    if shutil.which("java") is None:
        missing.append("java")
    return missing


def port_open(port: int) -> bool:
    """Whether something accepts connections on 127.0.0.1:``port`` (a master serves)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def jdbc_url(dsn: str) -> tuple[str, str, str]:
    """(JDBC URL, user, password) for a TCP ``postgresql://`` DSN."""
    parts = urlsplit(dsn.replace("+psycopg", ""))
    if not parts.hostname or parts.hostname.startswith("/"):
        raise ActiveMQMissingError(
            f"ActiveMQ's JDBC driver needs a TCP PostgreSQL; got {dsn!r} (set MQSTORE_TEST_DSN "
            "to a postgresql://user@127.0.0.1:5432/db server)"
        )
    url = f"jdbc:postgresql://{parts.hostname}:{parts.port or 5432}{parts.path}"
    return url, parts.username or "postgres", parts.password or ""


@dataclass
class ActiveMQConfig:
    """What the generated ``activemq.xml`` sets up."""

    name: str = "amq1"
    dsn: str | None = None  # None: KahaDB
    create_tables: bool = True
    prefix: str = ""
    lease_ms: int = 10_000
    renew_ms: int = 5_000
    prioritized: bool = False
    stomp_port: int = field(default_factory=free_port)
    openwire_port: int = field(default_factory=free_port)


def render_xml(cfg: ActiveMQConfig, data_dir: Path) -> str:
    """The broker's activemq.xml: JDBC on PostgreSQL with a lease locker, or KahaDB."""
    if cfg.dsn is not None:
        url, user, password = jdbc_url(cfg.dsn)
        datasource = f"""
  <bean id="pg-ds" class="org.apache.commons.dbcp2.BasicDataSource" destroy-method="close">
    <property name="driverClassName" value="org.postgresql.Driver"/>
    <property name="url" value="{url}"/>
    <property name="username" value="{user}"/>
    <property name="password" value="{password}"/>
    <property name="maxTotal" value="32"/>
    <property name="poolPreparedStatements" value="true"/>
  </bean>"""
        statements = (
            f'<statements><statements tablePrefix="{cfg.prefix}"/></statements>'
            if cfg.prefix
            else ""
        )
        create = str(cfg.create_tables).lower()
        persistence = f"""
      <jdbcPersistenceAdapter dataSource="#pg-ds" createTablesOnStartup="{create}"
                              lockKeepAlivePeriod="{cfg.renew_ms}">
        <locker><lease-database-locker lockAcquireSleepInterval="{cfg.lease_ms}"/></locker>
        {statements}
      </jdbcPersistenceAdapter>"""
    else:
        datasource = ""
        persistence = f'<kahaDB directory="{data_dir}/kahadb"/>'
    policy = ""
    if cfg.prioritized:
        policy = """<destinationPolicy><policyMap><policyEntries>
      <policyEntry queue=">" prioritizedMessages="true"/>
      <policyEntry topic=">" prioritizedMessages="true"/>
    </policyEntries></policyMap></destinationPolicy>"""
    return f"""<beans xmlns="http://www.springframework.org/schema/beans"
  xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
  xsi:schemaLocation="http://www.springframework.org/schema/beans http://www.springframework.org/schema/beans/spring-beans.xsd
  http://activemq.apache.org/schema/core http://activemq.apache.org/schema/core/activemq-core.xsd">
  {datasource}
  <broker xmlns="http://activemq.apache.org/schema/core" brokerName="{cfg.name}" useJmx="false"
          persistent="true" dataDirectory="{data_dir}" schedulerSupport="false">
    {policy}
    <persistenceAdapter>{persistence}
    </persistenceAdapter>
    <transportConnectors>
      <transportConnector name="openwire" uri="tcp://127.0.0.1:{cfg.openwire_port}"/>
      <transportConnector name="stomp" uri="stomp://127.0.0.1:{cfg.stomp_port}"/>
    </transportConnectors>
  </broker>
</beans>
"""


LOG4J = """log4j.rootLogger=INFO, out
log4j.appender.out=org.apache.log4j.FileAppender
log4j.appender.out.file=${activemq.data}/activemq.log
log4j.appender.out.layout=org.apache.log4j.PatternLayout
log4j.appender.out.layout.ConversionPattern=%d %-5p [%t] %c - %m%n
"""


class ActiveMQBroker:
    """One ActiveMQ process in its own base directory."""

    def __init__(self, cfg: ActiveMQConfig, base: Path) -> None:
        missing = missing_parts()
        if missing:
            raise ActiveMQMissingError(
                f"cannot run ActiveMQ: missing {', '.join(missing)}; install with "
                f"`apt-get install -y --no-install-recommends {PACKAGES}`"
            )
        self.cfg, self.base = cfg, base
        self.conf, self.data = base / "conf", base / "data"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def log_path(self) -> Path:
        return self.data / "activemq.log"

    def log_text(self) -> str:
        out = self.base / "stdout.log"
        text = out.read_text(errors="replace") if out.exists() else ""
        if self.log_path.exists():
            text += self.log_path.read_text(errors="replace")
        return text

    def start(self, *, wait: bool = True, timeout: float = 60) -> ActiveMQBroker:
        self.conf.mkdir(parents=True, exist_ok=True)
        self.data.mkdir(parents=True, exist_ok=True)
        (self.conf / "activemq.xml").write_text(render_xml(self.cfg, self.data))
        (self.conf / "log4j.properties").write_text(LOG4J)
        classpath = ":".join([str(self.conf), *map(str, JARS)])
        cmd = [
            "java",
            "-Xmx512m",
            "-XX:+UseSerialGC",
            *JAVA_FLAGS,
            f"-Dactivemq.classpath={classpath}",
            f"-Dactivemq.home={HOME}",
            f"-Dactivemq.base={self.base}",
            f"-Dactivemq.conf={self.conf}",
            f"-Dactivemq.data={self.data}",
            "-Djava.io.tmpdir=" + str(self.data),
            "-jar",
            str(HOME / "bin" / "activemq.jar"),
            "start",
            f"xbean:file:{self.conf / 'activemq.xml'}",
        ]
        stdout = (self.base / "stdout.log").open("ab")
        self.process = subprocess.Popen(
            cmd,
            stdout=stdout,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        if wait:
            self.wait_serving(timeout)
        return self

    def serving(self) -> bool:
        return port_open(self.cfg.stomp_port)

    def wait_serving(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(
                    f"ActiveMQ exited with {self.process.returncode}:\n" + self.log_text()[-4000:]
                )
            if self.serving():
                return
            time.sleep(0.2)
        raise TimeoutError(
            f"ActiveMQ did not serve STOMP within {timeout}s:\n" + self.log_text()[-4000:]
        )

    def stop(self, timeout: float = 30) -> None:
        """SIGTERM: ActiveMQ stops cleanly and releases its lease."""
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        """SIGKILL, as a crash."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)
