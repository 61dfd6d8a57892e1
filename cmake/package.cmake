# The Debian package: `cpack -G DEB` in the build directory writes vrdma_<version>_<arch>.deb.
#
# It holds what `cmake --install` installs (programs, drop-in libraries, helpers, scripts, the
# manual pages of cmake/manpages.cmake, the README and docs/), under /usr, and the files only the
# package installs (component "package", left out of a plain `cmake --install`, so that a source
# install into /usr/local never shadows them): vrdmad's systemd unit, its configuration file (a
# conffile), the maintainer scripts' service and CDI handling (deploy/debian), and the Grafana
# dashboards of deploy/grafana.
#
# CPack rather than debian/ and dpkg-buildpackage: the package is made from the build the tests
# have just run, in seconds, with CMake's install rules as the one list of what is installed
# (the same as a source install's), and dpkg-shlibdeps for the libraries' dependencies.
set(VRDMA_PACKAGE_ONLY package)

include(${CMAKE_CURRENT_LIST_DIR}/manpages.cmake)  # man vrdma, man vrdmad (help2man)

install(FILES ${PROJECT_SOURCE_DIR}/deploy/systemd/vrdmad.service
        DESTINATION /lib/systemd/system COMPONENT ${VRDMA_PACKAGE_ONLY} EXCLUDE_FROM_ALL)
install(FILES ${PROJECT_SOURCE_DIR}/deploy/config/vrdmad.yaml
        DESTINATION /etc/vrdma COMPONENT ${VRDMA_PACKAGE_ONLY} EXCLUDE_FROM_ALL)
# The documentation, with its links intact: share/doc/vrdma/README.md and share/doc/vrdma/docs/.
install(FILES ${PROJECT_SOURCE_DIR}/README.md DESTINATION share/doc/vrdma)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/docs/ DESTINATION share/doc/vrdma/docs
        FILES_MATCHING PATTERN "*.md")
# Grafana dashboards (JSON), when there are any: /usr/share/vrdma/grafana.
file(GLOB vrdma_dashboards CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/deploy/grafana/*.json)
if(vrdma_dashboards)
  install(FILES ${vrdma_dashboards}
          DESTINATION share/vrdma/grafana COMPONENT ${VRDMA_PACKAGE_ONLY} EXCLUDE_FROM_ALL)
endif()

file(WRITE ${PROJECT_BINARY_DIR}/debian/conffiles "/etc/vrdma/vrdmad.yaml\n")

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME vrdma)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "RDMA for containers, in software")
set(CPACK_PACKAGE_DESCRIPTION
    "Every container gets a virtual RDMA device: unmodified verbs and rdma_cm programs run in
containers through drop-in libibverbs.so.1 and librdmacm.so.1 and the per-host daemon
vrdmad (shared memory on one host, TCP routers between hosts). Includes vrdmad and its
systemd service, the vrdma command (status, reload, sandbox test bed, demo, CDI spec), the
Kubernetes device plugin and the benchmark helpers.")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "vrdma developers <vrdma@localhost>")
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# What the demo and the sandbox run, beyond the libraries' own dependencies.
set(CPACK_DEBIAN_PACKAGE_DEPENDS "ibverbs-utils, perftest, iproute2, python3, iperf3, sockperf")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "rdmacm-utils, etcd-server, python3-matplotlib")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "podman, ucx-utils")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${PROJECT_SOURCE_DIR}/deploy/debian/postinst
    ${PROJECT_SOURCE_DIR}/deploy/debian/prerm
    ${PROJECT_SOURCE_DIR}/deploy/debian/postrm
    ${PROJECT_BINARY_DIR}/debian/conffiles)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION TRUE)
set(CPACK_STRIP_FILES TRUE)
# Everything in one package: the default component and the package-only files.
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_GROUPING ALL_COMPONENTS_IN_ONE)
set(CPACK_COMPONENTS_ALL Unspecified ${VRDMA_PACKAGE_ONLY})
include(CPack)
